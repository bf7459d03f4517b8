"""LVCap-Eval's event score S_e as the paper states it: official mode's default, `event_scoring = "paper"`.

The paper (§3.4, Eq. 1; Appendix B) defines S_e per video from two GPT-4.1 calls; DREAM-1K's AutoDQ (autodq.py), which
the paper says only "inspired" its pipeline, is the named variant `event_scoring = "autodq"`.

Per (video, caption), two calls, each ONE user message, no system message, no sampling parameters (none stated):

* step "extract": Prompt2 (pack id `gt/extract_events`) with the caption attached after the instructions; the reply
  is JSON Lines, one `{"<n>": "<event>"}` object per event = E_model;
* step "event_match" (after an accepted extraction): Prompt5 (pack id `judge/event_match`) with the two event lists
  attached as JSON Lines: E_ref = the item's reference events (the ground-truth events, extracted and
  human-validated when the benchmark was built, §3.3: Prompt5 calls them "extracted through human annotation") and
  E_model. The reply is one JSON line with `recall`, `precision` and `f1` (or `f1_score`).

The paper does not say how the inputs are attached (lvcap.toml `not_available`): the layout below is capeval's.
Where the paper is silent, capeval's reading (docs/fidelity_lvcap_vci.md, and the `reading` column of every paper
S_e row, READING):

* per video: R and P are the judge's Prompt5 recall and precision; F1 = 2PR/(P+R) by Eq. 1 (0 when P+R = 0) and
  S_e = 100 x F1; the judge's own f1 is kept in the verdict detail (`f1_reported`), not used;
* across videos: the plain mean of the per-video S_e (and of R and of P), one video one weight; no per-category level
  (categories are reported as their own rows, `category:<name>`);
* a video whose extraction or match reply is still rejected after the retries (10 tries, the same request, as in
  the other official steps) is left out of the means and counted in `n_no_verdict`;
* an empty list: P (empty E_model) or R (empty E_ref) may be given as null and is then 0.
"""

from __future__ import annotations

import json
import math

from capeval.engine.protocols.base import Rendered
from capeval.engine.protocols.lvcap.codes import BatchVerdict
from capeval.engine.replies.repair import ParseError
from capeval.engine.schemas import NO_VERDICT, ParseStatus

EXTRACT_ID = "gt/extract_events"
MATCH_ID = "judge/event_match"
SCORINGS = ("paper", "autodq")
READING = ("paper Eq. 1 per video (R, P from Prompt5; F1 = 2PR/(P+R)), mean over videos: capeval's reading, "
           "the paper states no averaging")


def check_scoring(mode: str, event_scoring: str | None) -> str | None:
    """The run's event scoring: official mode "paper" (default) or "autodq"; strict mode has its own flow (None)."""
    if event_scoring is not None and event_scoring not in SCORINGS:
        raise ValueError(f"lvcap: param event_scoring must be one of {list(SCORINGS)}, got {event_scoring!r}")
    if mode != "official":
        if event_scoring is not None:
            raise ValueError("lvcap: param event_scoring applies to mode='official' only (strict mode has its own "
                             "event flow, engine/protocols/lvcap/metrics.py)")
        return None
    return event_scoring or "paper"


def check_pack(pack, where: str) -> None:
    missing = [i for i in (EXTRACT_ID, MATCH_ID) if not pack.has(i)]
    if missing:
        raise ValueError(f"lvcap: event_scoring='paper' needs prompt ids {missing} in the {where} pack {pack.path} "
                         f"(the LVCap-Eval pack, lvcap.toml, has them); for DREAM-1K's AutoDQ prompts set "
                         f"event_scoring='autodq'")


def _jsonl(events: list[str]) -> str:
    return "\n".join(json.dumps({str(i): e}, ensure_ascii=False) for i, e in enumerate(events, start=1)) or "(none)"


def render_extract(pack, caption_text: str, *, parse: dict) -> Rendered:
    system, instructions = pack.render(EXTRACT_ID)
    user = f"{instructions}\n\nInput text:\n{caption_text}"
    return Rendered(task="events", step="extract", system=system, user=user, max_tokens=None, temperature=None,
                    send_seed=False, fields={"caption": caption_text, "reply_format": "jsonl"},
                    parse={**parse, "event_scoring": "paper"})


def render_match(pack, video_id: str, reference: list[str], predicted: list[str]) -> Rendered:
    system, instructions = pack.render(MATCH_ID)
    user = (f"{instructions}\n\nvideo_id: {video_id}\n\nGround Truth (GT) events:\n{_jsonl(reference)}\n\n"
            f"Model Output events:\n{_jsonl(predicted)}")
    return Rendered(task="events", step="event_match", system=system, user=user, max_tokens=None, temperature=None,
                    send_seed=False, fields={"gt_events": json.dumps(reference, ensure_ascii=False),
                            "model_events": json.dumps(predicted, ensure_ascii=False), "video_id": str(video_id)},
                    parse={"mode": "official", "event_scoring": "paper", "n_gt": len(reference),
                           "n_model": len(predicted)})


# -- replies ---------------------------------------------------------------------------------------------------------
def _json_lines(text: str | None) -> list[object]:
    """Every line that is a JSON object (fence lines and blank lines skipped, a trailing comma allowed); a line that
    starts with '{' but is not JSON is an error (events would be lost silently)."""
    if text is None or not text.strip():
        raise ParseError("empty output")
    out = []
    for line in text.splitlines():
        s = line.strip().rstrip(",").strip()
        if not s.startswith("{"):
            continue
        try:
            out.append(json.loads(s))
        except (ValueError, RecursionError) as exc:
            raise ParseError(f"line {s[:80]!r} is not a JSON object: {exc}") from None
    return out


def parse_extract(text: str | None) -> list[str]:
    """Prompt2's JSON Lines -> the events in reply order. Each object's values must be strings; `{}` alone gives
    no events; a reply without any JSON object line is rejected."""
    objects = _json_lines(text)
    if not objects:
        raise ParseError("no JSON Lines event object in the reply")
    events = []
    for obj in objects:
        if not isinstance(obj, dict):
            raise ParseError(f"JSON line {obj!r} is not an object"[:200])
        for value in obj.values():
            if not isinstance(value, str):
                raise ParseError(f"event {value!r} is not a string"[:200])
            if value.strip():
                events.append(value.strip())
    return events


def _fraction(obj: dict, key: str, empty: bool) -> float:
    value = obj.get(key)
    if value is None and empty:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ParseError(f"{key!r} must be a number in [0, 1], got {value!r}"[:200])
    if not 0.0 <= value <= 1.0:
        raise ParseError(f"{key!r} = {value} is outside [0, 1]")
    return float(value)


def parse_match(text: str | None, n_gt: int, n_model: int) -> dict:
    """Prompt5's JSON line -> {recall, precision, f1 (Eq. 1), f1_reported, score (= 100 x f1)}. The line holding
    `recall` and `precision` is taken; several such lines that disagree are rejected (one video is sent)."""
    results = [o for o in _json_lines(text) if isinstance(o, dict) and "recall" in o and "precision" in o]
    if not results:
        raise ParseError("no JSON line with 'recall' and 'precision'")
    if any(o != results[0] for o in results[1:]):
        raise ParseError(f"{len(results)} different result lines for one video")
    obj = results[0]
    r = _fraction(obj, "recall", n_gt == 0)
    p = _fraction(obj, "precision", n_model == 0)
    f1 = 2.0 * p * r / (p + r) if p + r > 0 else 0.0
    reported = obj.get("f1", obj.get("f1_score"))
    return {"recall": r, "precision": p, "f1": f1, "score": 100.0 * f1,
            "f1_reported": reported if isinstance(reported, (int, float)) else None, "n_gt": n_gt,
            "n_model": n_model}


def parse_reply(step: str, text: str | None, ctx: dict) -> tuple[int, object, str]:
    """(verdict code, ParseStatus, detail JSON) of a paper-scoring reply; ParseError when it is rejected."""
    if step == "extract":
        return NO_VERDICT, ParseStatus.OK, json.dumps({"events": parse_extract(text)}, ensure_ascii=False)
    if step == "event_match":
        detail = parse_match(text, int(ctx["n_gt"]), int(ctx["n_model"]))
        return int(BatchVerdict.JUDGED), ParseStatus.OK, json.dumps(detail)
    raise ParseError(f"paper event scoring has no step {step!r}")
