"""DREAM-1K's AutoDQ: the caption's events against the clip's reference events, entailed in both directions ->
per-clip, per-source and overall precision, recall and F1."""

from capeval.engine.protocols.base import JudgeProtocol as _JudgeProtocol


class Dream1kProtocol(_JudgeProtocol):
    name = "dream1k"
    version = "1"


PROTOCOL = Dream1kProtocol()
