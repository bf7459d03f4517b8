"""VDC's five caption kinds (one question set and one caption prompt pool each) and which kinds a caption answers.

The official harness captions each video once per kind, with a prompt drawn from that kind's pool, and judges each
caption only on its kind's questions. capeval reads the kind off the caption's `prompt_id`: a prompt id naming kinds
(a whole-token match, tokens separated by anything but letters and digits: `vdc_detailed`, `my_camera_prompt`,
`caption/main_object/03`) is judged on those kinds' questions only; a prompt id naming none (a generic prompt) is
judged on every kind."""

from __future__ import annotations

import re

from .release import KINDS

# "main_object" holds an underscore, so tokens are delimited by non-alphanumerics only through look-arounds
_KIND_TOKEN = re.compile(r"(?<![a-z0-9])(" + "|".join(KINDS) + r")(?![a-z0-9])")


def kinds_named(prompt_id: str | None) -> tuple[str, ...]:
    """The kinds a prompt id names, in KINDS order (empty: it names none)."""
    found = set(_KIND_TOKEN.findall((prompt_id or "").lower()))
    return tuple(k for k in KINDS if k in found)


def judged_kinds(prompt_id: str | None) -> tuple[str, ...]:
    """The kinds whose questions a caption made with this prompt is judged on: the kinds it names, else all."""
    return kinds_named(prompt_id) or KINDS
