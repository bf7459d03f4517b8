"""Where AutoDQ's one implementation lives: LVCap-Eval's protocol (its `event_scoring = "autodq"` variant), reached
through the registry at run time (a benchmark package imports no other: tests/test_layers.py)."""

from __future__ import annotations

from capeval.engine.protocols.base import JudgeProtocol
from capeval.engine.registry import lookup

#: the protocol that holds AutoDQ's implementation
IMPLEMENTATION = "lvcap"
#: the official prompt pack's file name (in $CAPEVAL_PACKS, or given as the `prompts` param)
OFFICIAL_PACK = "autodq"


def implementation() -> JudgeProtocol:
    """LVCap-Eval's registered protocol object."""
    return lookup("protocol", IMPLEMENTATION)
