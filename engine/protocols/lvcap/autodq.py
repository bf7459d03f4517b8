"""Official-mode event score (S_e) as DREAM-1K's AutoDQ does it (bytedance/tarsier @ 63de87a,
evaluation/metrics/evaluate_dream_gpt.py): what is sent, and what is accepted.

Per clip and caption, three calls, each ONE user message rendered from the event pack (no system message, no
sampling parameters, so the server's defaults apply):

* step "extract": the caption's events, from `caption.lower()` with every '"' replaced by "'" (prompt
  `judge/extract_events`, placeholder `caption`);
* step "recall": the lower-cased caption as description, the reference events (Python `str()` of the list);
* step "precision" (after "extract"): the lower-cased reference as description, the caption's events.

An empty event list is sent as the one-element list holding the other text (newlines as spaces), and that
direction scores 1.0 whatever the verdict. Replies are accepted or rejected by the official rules (`parse_extract`,
`parse_entailment`); a rejected reply is asked again (JudgingPolicy(max_reasks=9): 10 tries in all), and a clip
with any step still rejected is Failed: its rows stay without a verdict and it is left out of every average
(autodq_metrics.py).
"""

from __future__ import annotations

import ast
import json
import re

from capeval.engine.replies.repair import ParseError
from capeval.engine.protocols.base import Rendered

EXTRACT_ID = "judge/extract_events"
ENTAIL_ID = "judge/entailment"
RELATIONSHIPS = ("entailment", "neutral", "contradiction")
HIT = "entailment"  # both directions are judged with is_recall=True: only entailment is a hit
OFFICIAL_TRIES = 10  # max_retry in extract_events / evaluate_one_sample


def extract_input(caption: str) -> str:
    """The text whose events are extracted: lower-cased, double quotes turned into single quotes."""
    return caption.lower().replace('"', "'")


def events_text(events: list, other_text: str) -> tuple[str, int]:
    """(the `events` placeholder, number of events judged): Python's str() of the list, or of [other_text] with
    newlines as spaces when the list is empty (then 0 events are judged and the score is 1.0)."""
    if len(events) == 0:
        return str([other_text.replace("\n", " ")]), 0
    return str(events), len(events)


def render_extract(pack, task: str, caption: str, *, parse: dict) -> Rendered:
    system, user = pack.render(EXTRACT_ID, caption=extract_input(caption))
    return Rendered(task=task, step="extract", system=system, user=user, max_tokens=None, temperature=None,
                    send_seed=False, fields={"caption": extract_input(caption)}, parse=parse)


def render_entailment(pack, task: str, step: str, *, description: str, events_repr: str, n_events: int,
                      events_json: str, parse: dict | None = None) -> Rendered:
    """One entailment call judging a whole event list (`events_repr` as the prompt shows it)."""
    system, user = pack.render(ENTAIL_ID, description=description, events=events_repr)
    return Rendered(task=task, step=step, system=system, user=user, max_tokens=None, temperature=None,
                    send_seed=False, fields={"caption": description, "events": events_json},
                    parse={**(parse or {}), "n_events": n_events, "events_repr": events_repr})


# -- what the official code accepts ------------------------------------------------------------------------------
def _strip_leading_fence(text: str) -> str:
    """Only a reply that STARTS with ```json / ```python loses its fences (every ``` mark is removed)."""
    if text.startswith("```json"):
        return text.replace("```json", "").replace("```", "").strip()
    if text.startswith("```python"):
        return text.replace("```python", "").replace("```", "").strip()
    return text


def parse_extract(text: str | None) -> list:
    """The caption's events from an extraction reply: `ast.literal_eval(reply)['events']`, which must be a list that
    is empty or whose FIRST item is a string (the official check looks no further). Raises ParseError otherwise."""
    if text is None:
        raise ParseError("no content")
    body = _strip_leading_fence(text)
    try:
        value = ast.literal_eval(body)
        events = value["events"]
    except Exception as exc:  # noqa: BLE001 - the official code rejects on any exception here
        raise ParseError(f"not a Python dict with key 'events': {type(exc).__name__}: {exc}") from None
    if not isinstance(events, list) or (len(events) and not isinstance(events[0], str)):
        raise ParseError("'events' must be a list whose first item is a string")
    return events


def clean_entailment(text: str) -> str:
    """The official clean-up of an entailment reply before json.loads (whitespace collapsed, fences, outer braces,
    True/False, '}{' separators, trailing commas, '[Placeholder]', '{Events:')."""
    q = text.strip()
    q = re.sub(r"\n+", "\n", q)
    q = re.sub(r"\s+", " ", q)
    q = _strip_leading_fence(q)
    if not q.startswith("{"):
        q = "{" + q
    if not q.endswith("}"):
        q = q + "}"
    q = q.replace("True", "true").replace("False", "false")
    q = q.replace("} {", "}, {").replace("}{", "}, {")
    q = q.replace(",\n}", "\n}").replace(", \n}", "\n}").replace(", }", "}").replace(",}", "}")
    q = q.replace(",\n]", "\n]").replace(", \n]", "\n]").replace(", ]", "]").replace(",]", "]")
    q = q.replace("[Placeholder]", "null")
    return q.replace("{Events:", "").strip()


def parse_entailment(text: str | None, n_events: int) -> dict:
    """An accepted entailment reply -> {"relationships": [as written], "hits", "n_events", "score"}; ParseError when
    the official rules reject it: not JSON after the clean-up, no 'events' list, a count other than n_events (1 when
    the list was empty), or a relationship that is not one of the three classes after strip().lower()."""
    if text is None:
        raise ParseError("no content")
    cleaned = clean_entailment(text)
    try:
        filled = json.loads(cleaned)["events"]
    except Exception as exc:  # noqa: BLE001
        raise ParseError(f"not JSON with an 'events' list after the official clean-up: {exc}") from None
    try:
        count = len(filled)
    except TypeError:
        raise ParseError("'events' is not a list") from None
    if not (count == n_events or (n_events == 0 and count == 1)):
        raise ParseError(f"{count} judged events for {n_events} events sent")
    relationships, hits = [], 0
    try:
        for event in filled:
            label = event["relationship"].strip().lower()
            if label not in RELATIONSHIPS:
                raise ParseError(f"relationship {event['relationship']!r} is not one of {list(RELATIONSHIPS)}")
            hits += label == HIT
            relationships.append(event["relationship"])
    except ParseError:
        raise
    except Exception as exc:  # noqa: BLE001 - a missing key or a non-dict item is a rejected reply
        raise ParseError(f"malformed judged event: {type(exc).__name__}: {exc}") from None
    score = 1.0 if n_events == 0 else hits / n_events
    return {"relationships": relationships, "hits": hits, "n_events": n_events, "score": score}
