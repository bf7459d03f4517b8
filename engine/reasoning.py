"""Reasoning output of thinking models: split it from the answer before a caption is judged or a reply is parsed.

Thinking models (DeepSeek-R1, Qwen3, QwQ, GLM-4.5, ...) write their reasoning between tags before the answer:
`<think> ... </think> The answer.` Left in, the reasoning becomes part of a caption that is judged and is read by
a protocol's parser as if it were the verdict (a reasoning that weighs "yes" before the answer "no" is parsed as
"yes"). `split_reasoning(text, tags)` returns (visible, reasoning); callers keep the raw text too (verdict rows'
`raw_output`, caption rows' `raw_text`; the judgment cache stores the raw reply, so other tags re-parse it without
asking the judge again).

What counts as reasoning, with tags (OPEN, CLOSE) (default `<think>`, `</think>`):
- every OPEN ... CLOSE block, wherever it is;
- a reply with a CLOSE before any OPEN: everything before that first CLOSE (servers whose chat template already
  holds the opening tag return only the closing one);
- an OPEN never closed: everything after it (generation stopped while thinking; the visible answer is then what
  came before the tag, usually nothing, and an empty answer is a parse failure saying so, never the reasoning
  parsed as the answer).
A reply without either tag is returned unchanged, byte for byte; otherwise the visible text is stripped of the
whitespace that surrounded the removed blocks.

Tags are configured per judge or captioner (`reasoning_tags`: a pair of strings, "none"/[] for no stripping, unset
for the default); `parse_tags` checks a value and `tags_of(backend)` reads a backend's setting.

Reasoning tokens (`reasoning_tokens` columns) are the server's count when it reports one
(`usage.completion_tokens_details.reasoning_tokens`); otherwise `estimate_reasoning_tokens`: the reply's
completion tokens shared out by characters between reasoning and answer, or, when the backend gave no token count,
the number of whitespace-separated words of the reasoning.
"""

from __future__ import annotations

import json
from typing import Any

DEFAULT_TAGS: tuple[str, str] = ("<think>", "</think>")
_OFF = ("none", "off", "false", "")


class ReasoningTagsError(ValueError):
    """A `reasoning_tags` value that is not a pair of tags; the message names the field."""


def parse_tags(value: Any, field: str = "reasoning_tags") -> tuple[str, str] | None:
    """(open, close) from a configured value; None for "none" (no stripping); DEFAULT_TAGS for None (unset).

    Accepted: a list/tuple of two non-empty strings, the same as JSON text ('["<think>", "</think>"]' from a
    command-line option), "none"/"off"/"" or [] or False for no stripping."""
    if value is None:
        return DEFAULT_TAGS
    if value is False or (isinstance(value, (list, tuple)) and not value):
        return None
    if isinstance(value, str):
        if value.strip().lower() in _OFF:
            return None
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise ReasoningTagsError(f"{field}: expected two tags like [\"<think>\", \"</think>\"] or \"none\", "
                                     f"got {value!r}") from None
        return parse_tags(value, field)
    if (not isinstance(value, (list, tuple)) or len(value) != 2
            or not all(isinstance(t, str) and t.strip() for t in value)):
        raise ReasoningTagsError(f"{field}: expected two non-empty tags (opening, closing) like "
                                 f"[\"<think>\", \"</think>\"] or \"none\", got {value!r}")
    if value[0] == value[1]:
        raise ReasoningTagsError(f"{field}: the opening and closing tags must differ, got {value!r}")
    return (value[0], value[1])


def tags_of(backend: Any) -> tuple[str, str] | None:
    """The reasoning tags a judge or captioner is configured with: its `reasoning_tags` attribute, else its
    config's (capeval.adapters.openai_http.HTTPConfig), else the default."""
    for holder in (backend, getattr(backend, "config", None)):
        if holder is not None and hasattr(holder, "reasoning_tags"):
            return parse_tags(getattr(holder, "reasoning_tags"))
    return DEFAULT_TAGS


def split_reasoning(text: str | None, tags: tuple[str, str] | None = DEFAULT_TAGS) -> tuple[str | None, str | None]:
    """(visible, reasoning) of a reply; reasoning is None when the reply has none (see the module docstring)."""
    if text is None or tags is None:
        return text, None
    open_tag, close_tag = tags
    first_open, first_close = text.find(open_tag), text.find(close_tag)
    if first_open < 0 and first_close < 0:
        return text, None
    visible: list[str] = []
    thoughts: list[str] = []
    pos = 0
    if first_close >= 0 and (first_open < 0 or first_close < first_open):
        thoughts.append(text[:first_close])  # the opening tag was in the prompt's template
        pos = first_close + len(close_tag)
    while True:
        start = text.find(open_tag, pos)
        if start < 0:
            visible.append(text[pos:])
            break
        visible.append(text[pos:start])
        end = text.find(close_tag, start + len(open_tag))
        if end < 0:  # never closed: the rest is reasoning
            thoughts.append(text[start + len(open_tag):])
            break
        thoughts.append(text[start + len(open_tag):end])
        pos = end + len(close_tag)
    reasoning = "\n".join(t.strip() for t in thoughts if t.strip())
    return "".join(visible).strip(), reasoning


def unclosed(text: str | None, tags: tuple[str, str] | None = DEFAULT_TAGS) -> bool:
    """True when the reply opens a reasoning block it never closes (cut off while thinking)."""
    if text is None or tags is None:
        return False
    start = text.rfind(tags[0])
    return start >= 0 and text.find(tags[1], start + len(tags[0])) < 0


def empty_answer_reason(text: str, tags: tuple[str, str]) -> str:
    """Why a reply whose reasoning was stripped has no answer left (for the row's error)."""
    if unclosed(text, tags):
        return (f"reply is reasoning only: {tags[0]} was never closed by {tags[1]} (cut off while thinking? raise "
                f"max_tokens); no answer after the reasoning")
    return f"reply is reasoning only: nothing after {tags[1]}"


def estimate_reasoning_tokens(reasoning: str | None, visible: str | None, completion_tokens: int | None) -> int:
    """Tokens of the reasoning when the server did not count them (see the module docstring)."""
    if not reasoning:
        return 0
    if completion_tokens and completion_tokens > 0:
        total = len(reasoning) + len(visible or "")
        return int(round(completion_tokens * len(reasoning) / total)) if total else 0
    return len(reasoning.split())


def reasoning_tokens(reasoning: str | None, visible: str | None, completion_tokens: int | None,
                     reported: int | None) -> int | None:
    """The `reasoning_tokens` column: the server's count when it gave one, else the estimate; None when the reply
    had no reasoning and the server reported nothing."""
    if reported is not None and reported > 0:
        return int(reported)
    if not reasoning:
        return None if reported is None else int(reported)
    return estimate_reasoning_tokens(reasoning, visible, completion_tokens)


def wrap_reasoning(reasoning: str | None, content: str | None) -> str | None:
    """The reply as the model wrote it, from a server that returned the reasoning apart (`reasoning_content`):
    `<think>\\n{reasoning}\\n</think>\\n\\n{content}`, so the raw reply (cached, stored in rows) keeps it and the
    default tags strip it again. Content None (generation stopped while thinking): the block is left open, as the
    model left it."""
    if not reasoning:
        return content
    if content is None:
        return f"{DEFAULT_TAGS[0]}\n{reasoning}"
    return f"{DEFAULT_TAGS[0]}\n{reasoning}\n{DEFAULT_TAGS[1]}\n\n{content}"


def strip_caption(response, tags: tuple[str, str] | None = DEFAULT_TAGS):
    """A CaptionResponse with its reasoning stripped (the caption stage calls this on every reply, segments too,
    before the text becomes a caption row or the context of the next segment): `text` without the reasoning,
    `raw_text` the whole reply (only when something was stripped), `reasoning_tokens` counted (the server's count,
    else the estimate) and taken out of `n_tokens`, so that n_tokens counts the caption alone. A reply that is all
    reasoning becomes a failed caption (text None, `error` saying so), and so does a reply with no text at all (empty
    or whitespace only): an empty caption is never judged."""
    import dataclasses

    text = getattr(response, "text", None)
    if text is None:
        return response
    if not text.strip():
        return dataclasses.replace(response, text=None, error=empty_caption_reason(text, response.truncated))
    visible, reasoning = split_reasoning(text, tags)
    reported = getattr(response, "reasoning_tokens", None)
    if reasoning is None and not reported:
        return response
    n_reasoning = reasoning_tokens(reasoning, visible, response.n_tokens, reported)
    changes: dict = {"reasoning_tokens": n_reasoning}
    if n_reasoning and response.n_tokens:
        changes["n_tokens"] = max(0, int(response.n_tokens) - n_reasoning)
    if reasoning is not None:
        changes["text"], changes["raw_text"] = visible, text
        if not visible:
            changes["text"] = None
            changes["error"] = "caption " + empty_answer_reason(text, tags)
    return dataclasses.replace(response, **changes)


def empty_caption_reason(text: str, truncated: bool = False) -> str:
    """Why a reply with no caption text failed (for the caption row's error)."""
    what = "an empty reply" if not text else f"only whitespace ({len(text)} characters)"
    cut = " and stopped at max_tokens" if truncated else ""
    return f"caption is empty: the captioner returned {what}{cut}; nothing to judge"


def caption_row_fields(response) -> dict:
    """The caption row's reasoning columns (capeval.engine.schemas.CAPTIONS) from a stripped CaptionResponse."""
    return {"raw_text": getattr(response, "raw_text", None),
            "reasoning_tokens": getattr(response, "reasoning_tokens", None)}
