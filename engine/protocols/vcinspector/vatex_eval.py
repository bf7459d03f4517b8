"""VATEX-EVAL human judgments (EMScore's release format): 3,000 videos x 6 candidate captions, each rated 1-5 by
three annotators, with 9 reference captions per video.

`vid_cans_score_dict.json` maps a video id to {"vid", "cands" (Python list literal of 6 captions), "scores" (a
6 x 3 list written as text; column = annotator slot), "refs" (Python list literal, 9 references)}.

* `load_ratings(folder)` -> Polars frame: video_id, candidate_index, candidate, rating_0, rating_1, rating_2 (the
  table `capeval align` correlates against);
* `load_items(folder)` / `load_captions(folder)`: the candidates as judge inputs (one ITEMS row per candidate,
  item_id "<video>/<k>", and per-item CAPTIONS rows whose video_id is that item id), with the annotators' ratings
  and the references in `extra`; verdicts on them join back through item_id (see capeval.engine.metrics.alignment).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import polars as pl
import pyarrow as pa

from capeval.engine import schemas
from capeval.engine.datasets.jsonl import DatasetFormatError

BENCHMARK = "vatex_eval"
FILE = "vid_cans_score_dict.json"
N_ANNOTATORS = 3


def _literal(value, path, vid, name):
    if isinstance(value, list):
        return value
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, TypeError) as exc:
        raise DatasetFormatError(path, None, f"video {vid!r}: not a list literal ({exc})", field=name) from None


def read_release(folder: str | Path) -> list[dict]:
    """[{video_id, cands, scores (n x annotators), refs}] in file order, checked."""
    path = Path(folder) / FILE if Path(folder).is_dir() else Path(folder)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file (expected the VATEX-EVAL folder holding {FILE})")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DatasetFormatError(path, exc.lineno, f"malformed JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise DatasetFormatError(path, None, "expected an object mapping video ids to records")
    out = []
    for vid, rec in data.items():
        if not isinstance(rec, dict):
            raise DatasetFormatError(path, None, f"video {vid!r}: expected an object", field=vid)
        cands = _literal(rec.get("cands"), path, vid, "cands")
        scores = _literal(rec.get("scores"), path, vid, "scores")
        refs = _literal(rec.get("refs", "[]"), path, vid, "refs")
        if not isinstance(scores, list) or len(scores) != len(cands):
            raise DatasetFormatError(path, None, f"video {vid!r}: {len(cands)} candidates but scores "
                                     f"{scores!r:.60}", field="scores")
        for row in scores:
            if not isinstance(row, list) or not all(isinstance(x, (int, float)) for x in row):
                raise DatasetFormatError(path, None, f"video {vid!r}: a scores row must list numbers, got {row!r}",
                                         field="scores")
        out.append({"video_id": str(vid), "cands": [str(c) for c in cands], "scores": scores,
                    "refs": refs[0] if refs and isinstance(refs[0], list) else refs})
    return out


def load_ratings(folder: str | Path) -> pl.DataFrame:
    rows = []
    for rec in read_release(folder):
        for k, (cand, ratings) in enumerate(zip(rec["cands"], rec["scores"])):
            rows.append({"video_id": rec["video_id"], "candidate_index": k, "candidate": cand,
                         **{f"rating_{a}": float(ratings[a]) if a < len(ratings) else None
                            for a in range(N_ANNOTATORS)}})
    schema = {"video_id": pl.String, "candidate_index": pl.Int64, "candidate": pl.String,
              **{f"rating_{a}": pl.Float64 for a in range(N_ANNOTATORS)}}
    return pl.DataFrame(rows, schema=schema)


def item_id(video_id: str, candidate_index: int) -> str:
    return f"{video_id}/{candidate_index}"


def load_items(folder: str | Path) -> pa.Table:
    rows = []
    for rec in read_release(folder):
        for k in range(len(rec["cands"])):
            rows.append({"benchmark": BENCHMARK, "task": "default", "item_id": item_id(rec["video_id"], k),
                         "video_id": rec["video_id"], "media_type": "video",
                         "extra": json.dumps({"candidate_index": k, "ratings": rec["scores"][k],
                                              "references": rec["refs"]}, ensure_ascii=False)})
    return schemas.conform(pa.Table.from_pylist(rows), schemas.ITEMS)


def load_captions(folder: str | Path, captioner: str = "vatex_eval", frame_spec: str = "linspace:32") -> pa.Table:
    rows = []
    for rec in read_release(folder):
        for k, cand in enumerate(rec["cands"]):
            rows.append({"caption_key": f"{BENCHMARK}:{item_id(rec['video_id'], k)}", "captioner": captioner,
                         "prompt_id": "candidate", "frame_spec": frame_spec, "video_id": item_id(rec["video_id"], k),
                         "text": cand})
    return schemas.conform(pa.Table.from_pylist(rows), schemas.CAPTIONS)
