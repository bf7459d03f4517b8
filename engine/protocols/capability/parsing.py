"""CAPability parsing: a JSON object (fences stripped, single quotes accepted via ast.literal_eval as the official
script does) -> CapabilityVerdict. Scored tasks read the `score` field only; classification tasks read `pred`."""

from __future__ import annotations

import ast
import json

from engine.judging.repair import ParseError, extract_json, parse_int_field
from engine.protocols.base import parse_context
from engine.schemas import NO_VERDICT, ParseStatus

from .codes import FROM_SCORE, CapabilityVerdict


def _pred_list(raw) -> tuple[list[str], bool]:
    if isinstance(raw, list):
        return [str(x).strip().lower() for x in raw], False
    if isinstance(raw, str):  # the official prompt asks for "a python list" inside the JSON string
        s = raw.strip()
        if s.upper() in ("N/A", "NA", "NONE", ""):
            return ["n/a"], True
        try:
            value = ast.literal_eval(s)
        except (ValueError, SyntaxError):
            return [p.strip().strip("'\"").lower() for p in s.strip("[]").split(",") if p.strip()], True
        return _pred_list(value if isinstance(value, list) else [value])[0], True
    raise ParseError(f"'pred' is neither a list nor a string: {raw!r}")


def parse(request: dict, text: str | None) -> tuple[int, ParseStatus, str | None]:
    ctx = parse_context(request).get("parse", {})
    try:
        obj, repaired = extract_json(text, dict)
        if ctx.get("kind") == "classification":
            if "pred" not in obj:
                raise ParseError(f"JSON has no 'pred' field (keys: {sorted(obj)[:8]})")
            pred, fixed = _pred_list(obj["pred"])
            repaired |= fixed
            annotation = str(ctx.get("annotation", "")).strip().lower()
            if annotation in pred:
                code = CapabilityVerdict.POSITIVE
            elif not pred or all(p in ("n/a", "na") for p in pred):
                code = CapabilityVerdict.MISS
            else:
                code = CapabilityVerdict.NEGATIVE
            detail = {"pred": pred}
        else:
            score, fixed = parse_int_field(obj, "score", (1, 0, -1))
            repaired |= fixed
            code = FROM_SCORE[score]
            detail = {"score": score, "reason": obj.get("reason")}
    except ParseError as exc:
        return NO_VERDICT, ParseStatus.FAILED, str(exc)
    status = ParseStatus.REPAIRED if repaired else ParseStatus.OK
    return int(code), status, json.dumps(detail, ensure_ascii=False)
