"""VDC parsing, per mode (the request context's `settings.mode`).

Answer step: the reply is the prediction the score step judges. Official mode keeps it raw (no stripping: the
official script formats `state['answer_1']` into the judge prompt as it is, an empty reply included); strict mode
strips it and refuses an empty one (re-asked).

Score step, official mode: AuroraCap's `process_vdc_result.py` literally. The QA dict {question, answer, response}
is updated with `ast.literal_eval(reply)` (lines 248-251): no fence or prose removal, JSON `true` is no Python
literal, a list of pairs updates the dict like a mapping. A reply that literal_eval or the update rejects makes the
official script skip the WHOLE video (it stops asking its remaining questions): the row FAILS with the exception,
prefixed "official parse:". Then (lines 253-257) `float(qa['score'])` and `qa['pred'] == 'yes'`: no range check
(4.8, 7, -1, True, '3', 'nan' and 1e400 all pass float()), pred exact ('Yes', 'yes ', True are not 'yes'); an
exception there (a missing key, a score float() refuses) skips the video too: the row FAILS, prefixed
"official scoring:". The video-level consequences (drop, zero filter, means) are metrics.py's.

Every row whose reply literal_eval read also carries what lmms-eval's port of the metric (tasks/vdc/utils.py) makes of
it, for metrics.py's second reading: in `detail["lmms_eval"]` when the row has a verdict, else as a bracketed tag at
the end of the error ("[lmms-eval port: pair dropped]"). The port keeps a pair only `if 'pred' in response and
'score' in response` (else drops it), adds the raw score (a string score raises TypeError later) and compares
`pred == 'yes'`.

Score step, strict mode: the JSON object's `pred` ("yes"/"no"; case and spaces repaired) and integer `score` 0-5
(engine/replies/repair.py; an object quoted from the prompt's data is never the verdict); anything else fails and is
re-asked by the default judging policy."""

from __future__ import annotations

import ast
import json
import math
import re

from capeval.engine.protocols.base import RequestContext
from capeval.engine.replies.fences import data_texts
from capeval.engine.replies.repair import ParseError, extract_verdict, parse_int_field
from capeval.engine.schemas import NO_VERDICT, ParseStatus

from .codes import VDCVerdict

OFFICIAL_PARSE = "official parse"  # literal_eval or dict.update rejected the reply: the script stops asking
OFFICIAL_SCORING = "official scoring"  # float(qa['score']) or qa['pred'] raised after every question was asked
LMMS_MARK = " [lmms-eval port: "
LMMS_DROPPED = "pair dropped"
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")


def describe(exc: BaseException) -> str:
    """`Type: message` of an exception, memory addresses masked (so a stored error is the same on every run)."""
    return _ADDRESS.sub("0x...", f"{type(exc).__name__}: {exc}")


def json_value(value):
    """`value` itself when JSON keeps it exactly (text, bool, int, finite float, None), else its repr."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    return repr(value)


def encode_float(x: float) -> float | str:
    """A float for JSON text: finite as is, non-finite as "nan" / "inf" / "-inf" (float() reads them back)."""
    return x if math.isfinite(x) else repr(x)


def _lmms_score(score) -> dict:
    """How the port's `total_score += score` takes one kept score: a real number (bool, int, float), a complex one,
    or anything else (a TypeError when added)."""
    if isinstance(score, complex):
        return {"kind": "complex"}
    if isinstance(score, (bool, int, float)):
        try:
            return {"kind": "real", "value": encode_float(float(score)), "type": type(score).__name__}
        except OverflowError:  # an int too large for a float: the port's mean then raises
            return {"kind": "error", "error": "OverflowError: integer division result too large for a float"}
    return {"kind": "other", "type": type(score).__name__}


def lmms_pair(value) -> dict:
    """What lmms-eval's port makes of one parsed reply: {"kept": False} (a missing key drops the pair), {"error":
    ...} (its test or indexing raised: the port's video, then its whole run, fails) or {"kept": True, "score": ...,
    "is_yes": ...}."""
    try:
        if not ("pred" in value and "score" in value):
            return {"kept": False}
        score, pred = value["score"], value["pred"]
    except Exception as exc:  # noqa: BLE001 - the port's own `except Exception` around the same code
        return {"error": describe(exc)}
    return {"kept": True, "score": _lmms_score(score), "is_yes": bool(pred == "yes")}


def lmms_tag(pair: dict) -> str:
    if "error" in pair:
        return pair["error"]
    if not pair["kept"]:
        return LMMS_DROPPED
    return json.dumps(pair, sort_keys=True)


def lmms_from_error(error: str | None) -> dict | None:
    """The port's outcome stored in a failed row's error (None: the row has none, e.g. literal_eval failed, where
    the port fails the same way)."""
    error = error or ""
    start = error.rfind(LMMS_MARK)
    if start < 0 or not error.endswith("]"):
        return None
    tag = error[start + len(LMMS_MARK):-1]
    if tag == LMMS_DROPPED:
        return {"kept": False}
    if tag.startswith("{"):
        return json.loads(tag)
    return {"error": tag}


def parse_answer(text: str | None, mode: str = "strict") -> tuple[int, ParseStatus, str | None]:
    if text is None:
        return NO_VERDICT, ParseStatus.FAILED, "answer step: reply has no content"
    if mode == "official":  # kept raw, as the official script keeps state['answer_1']
        return NO_VERDICT, ParseStatus.OK, json.dumps({"answer": text}, ensure_ascii=False)
    if not text.strip():
        return NO_VERDICT, ParseStatus.FAILED, "empty answer"
    return NO_VERDICT, ParseStatus.OK, json.dumps({"answer": text.strip()}, ensure_ascii=False)


def parse_score_official(text: str | None, qa: dict | None = None) -> tuple[int, ParseStatus, str]:
    """The official reading of one score reply; `qa` is the QA dict before the update ({question, answer,
    response}: only its keys matter, none of which the scoring reads)."""
    if text is None:
        return NO_VERDICT, ParseStatus.FAILED, f"{OFFICIAL_PARSE}: reply has no content"
    try:
        value = ast.literal_eval(text)
    except Exception as exc:  # noqa: BLE001 - the official `except Exception` around the same call
        return NO_VERDICT, ParseStatus.FAILED, f"{OFFICIAL_PARSE}: {describe(exc)}"
    port = lmms_pair(value)
    tag = f"{LMMS_MARK}{lmms_tag(port)}]"
    qa = dict(qa or {"question": "", "answer": "", "response": ""})
    try:
        qa.update(value)
    except Exception as exc:  # noqa: BLE001
        return NO_VERDICT, ParseStatus.FAILED, f"{OFFICIAL_PARSE}: {describe(exc)}{tag}"
    try:  # the official order: total_score += float(qa['score']), then qa['pred'] == 'yes'
        score = float(qa["score"])
        is_yes = qa["pred"] == "yes"
    except Exception as exc:  # noqa: BLE001
        return NO_VERDICT, ParseStatus.FAILED, f"{OFFICIAL_SCORING}: {describe(exc)}{tag}"
    detail = {"pred": json_value(qa["pred"]), "pred_type": type(qa["pred"]).__name__,
              "score": json_value(qa["score"]), "score_type": type(qa["score"]).__name__,
              "score_float": encode_float(score), "is_yes": bool(is_yes), "lmms_eval": port}
    code = VDCVerdict.YES if is_yes else VDCVerdict.NO
    return int(code), ParseStatus.OK, json.dumps(detail, ensure_ascii=False)


def parse_score_strict(text: str | None, data: tuple[str, ...] = ()) -> tuple[int, ParseStatus, str | None]:
    """The JSON `pred` and `score` fields, and nothing else. `data`: the texts the prompt showed (never the
    verdict when the reply quotes them)."""
    try:
        obj, repaired = extract_verdict(text, ("pred", "score"), data=data)
        raw_pred = obj["pred"]
        if not isinstance(raw_pred, str) or raw_pred.strip().lower() not in ("yes", "no"):
            raise ParseError(f"'pred' is not 'yes' or 'no': {raw_pred!r}")
        pred = raw_pred.strip().lower()
        score, fixed = parse_int_field(obj, "score", tuple(range(6)))
    except ParseError as exc:
        return NO_VERDICT, ParseStatus.FAILED, str(exc)
    status = ParseStatus.REPAIRED if (repaired or fixed or pred != raw_pred) else ParseStatus.OK
    code = VDCVerdict.YES if pred == "yes" else VDCVerdict.NO
    return int(code), status, json.dumps({"pred": pred, "score": score}, ensure_ascii=False)


def parse(request: dict, text: str | None) -> tuple[int, ParseStatus, str | None]:
    full = RequestContext.decode(request.get("context"))
    ctx = full.parse
    mode = (ctx.get("settings") or {}).get("mode", "strict")
    if request.get("step") == "answer":
        return parse_answer(text, mode)
    if mode == "official":
        f = full.fields
        qa = {"question": f.get("question", ""), "answer": f.get("reference", ""), "response": f.get("answer", "")}
        code, status, detail = parse_score_official(text, qa)
    else:
        code, status, detail = parse_score_strict(text, data_texts(full.fields))
    answer = ctx.get("answer")
    if status != ParseStatus.FAILED and answer is not None:
        detail = json.dumps({**json.loads(detail), "answer": answer}, ensure_ascii=False)
    return code, status, detail
