"""Agreement of the local judge with the released GPT-4-Turbo verdicts on CAPability (accuracy, Cohen's kappa).

Builds CAPability judge requests from annotations + captions, answers them with `LocalJudge`, maps both answers to
verdict codes (engine/protocols/capability/codes.py) and compares per task. `--calibrate` fits the thresholds of
`capeval.engine.protocols.capability.stand_in.CALIBRATION` on the qwen2.5vl_7b split (run once; the result is pasted
into that module); the evaluation split is gpt-4o-0806, never used for fitting.
"""

from __future__ import annotations

import argparse
import itertools
import random
import json
import time
from pathlib import Path

import numpy as np

from capeval.adapters.base import JudgeRequest
from capeval.adapters.local_judge import BatchEmbeddings, LocalJudge
from capeval.engine.protocols.capability.stand_in import CALIBRATION
from capeval.engine.stand_in import overlap, sentences
from capeval.engine.protocols.capability.codes import CLASSIFICATION_TASKS, FROM_SCORE, TASKS, CapabilityVerdict

# Official CAPability categories (ali-vilab/CAPability evaluation/prompt.py).
CATEGORIES = {
    "camera_angle": ["level angle", "high angle", "low angle", "dutch angle"],
    "camera_movement": ["left", "right", "up", "down", "in", "out", "fixed"],
    "style": ["realistic", "animated", "special effect", "old-fashioned", "pixel art", "sketch art", "abstract art",
              "impressionism art", "cubism art"],
}
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "capability"


def _jsonl(path: Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def build_items(data: Path, model: str, tasks=TASKS, per_task: int | None = None) -> list[tuple[str, JudgeRequest, int]]:
    """(task, request, GPT-4-Turbo code) for items that have a caption and a released judgment; with `per_task`, a
    seeded random sample of that many judged items per task (the embedding model runs at ~50-500 sentences/s on
    2 shared cores, so the full 11k-item set takes tens of minutes)."""
    items = []
    for task in tasks:
        judged = _jsonl(data / "judgments" / model / f"{task}.jsonl")
        if per_task is not None and len(judged) > per_task:
            judged = random.Random(f"{task}:{per_task}").sample(judged, per_task)
        ann = {d["file_id"]: d["annotation"] for d in _jsonl(data / "annotations" / f"{task}.jsonl")}
        cap = {d["file_id"]: d["caption"] for d in _jsonl(data / "captions" / model / f"{task}.jsonl")}
        for j in judged:
            fid = j["file_id"]
            if fid not in ann or fid not in cap:
                continue
            a = ann[fid]
            if task == "dynamic_object_number":  # one verdict per object, in annotation order
                for k, ((obj, n), resp) in enumerate(zip(a.items(), j["response"])):
                    fields = {"caption": cap[fid], "annotation": json.dumps({obj: n})}
                    r = JudgeRequest(key=f"{task}/{fid}/{k}", user="", task=f"capability/{task}/judge", fields=fields)
                    items.append((task, r, _code(task, a, resp)))
                continue
            fields = {"caption": cap[fid], "annotation": a if isinstance(a, str) else json.dumps(a)}
            if task in CLASSIFICATION_TASKS:
                fields["categories"] = json.dumps(CATEGORIES[task])
            r = JudgeRequest(key=f"{task}/{fid}", user="", task=f"capability/{task}/judge", fields=fields)
            items.append((task, r, _code(task, a, j)))
    return items


def _code(task: str, annotation, verdict: dict) -> int:
    if task in CLASSIFICATION_TASKS:
        pred = verdict.get("pred") or ["N/A"]
        if pred == ["N/A"]:
            return int(CapabilityVerdict.MISS)
        return int(CapabilityVerdict.POSITIVE if annotation in pred else CapabilityVerdict.NEGATIVE)
    return int(FROM_SCORE[int(verdict["score"])])


def evaluate(data: Path, model: str = "gpt-4o-0806", per_task: int | None = 200) -> dict:
    from sklearn.metrics import accuracy_score, cohen_kappa_score

    items = build_items(data, model, per_task=per_task)
    t0 = time.perf_counter()
    responses = LocalJudge().judge([r for _, r, _ in items])
    elapsed = time.perf_counter() - t0
    # classification annotations are plain category strings; other tasks' codes depend on the score only
    local = [_code(t, r.fields["annotation"], json.loads(o.text)) for (t, r, _), o in zip(items, responses)]
    rows = {}
    for task in TASKS + ("overall",):
        idx = [i for i, (t, _, _) in enumerate(items) if task in (t, "overall")]
        y_gpt = [items[i][2] for i in idx]
        y_loc = [local[i] for i in idx]
        kappa = cohen_kappa_score(y_gpt, y_loc) if len(set(y_gpt) | set(y_loc)) > 1 else float("nan")
        rows[task] = {"n": len(idx), "accuracy": accuracy_score(y_gpt, y_loc), "kappa": kappa,
                      "gpt_positive_rate": float(np.mean(np.array(y_gpt) == 1)),
                      "local_positive_rate": float(np.mean(np.array(y_loc) == 1))}
    return {"model": model, "per_task_sample": per_task, "n_items": len(items), "judge_seconds": round(elapsed, 1), "tasks": rows}


def markdown(result: dict) -> str:
    lines = ["| task | n | accuracy | Cohen's kappa | GPT-4 positive rate | local positive rate |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for task, r in result["tasks"].items():
        lines.append(f"| {task} | {r['n']} | {r['accuracy']:.3f} | {r['kappa']:.3f} | "
                     f"{r['gpt_positive_rate']:.3f} | {r['local_positive_rate']:.3f} |")
    return "\n".join(lines)


def calibrate(data: Path, model: str = "qwen2.5vl_7b", per_task: int | None = 150) -> dict:
    """Grid-search (t_hi, t_lo, code between, code below) per mention task, maximising accuracy on `model`."""
    out = {}
    by_task = {task: build_items(data, model, (task,), per_task) for task in CALIBRATION}
    texts = set()
    for items in by_task.values():
        for _, r, _ in items:
            texts.update(sentences(r.fields["caption"]))
            texts.add(r.fields["annotation"])
    emb = BatchEmbeddings(texts)
    for task, items in by_task.items():
        feats = []
        for _, r, _ in items:
            ann, cap = r.fields["annotation"], r.fields["caption"]
            lex = 1.0 if task in ("OCR", "character_identification") and ann.lower() in cap.lower() else overlap(ann, cap)
            feats.append(max(emb.max_sim(ann, sentences(cap)), lex))
        feats = np.array(feats)
        gold = np.array([FROM_SCORE_INV[c] for _, _, c in items])
        best = None
        grid = np.round(np.arange(0.1, 0.96, 0.05), 2)
        for hi, lo in itertools.product(grid, grid):
            if lo > hi:
                continue
            for mid, low in itertools.product((0, -1), (0, -1)):
                pred = np.where(feats >= hi, 1, np.where(feats >= lo, mid, low))
                acc = float(np.mean(pred == gold))
                if best is None or acc > best[0]:
                    best = (acc, (float(hi), float(lo), mid, low))
        out[task] = best[1]
        print(f"{task}: {best[1]} accuracy on {model} {best[0]:.3f}", flush=True)
    return out


FROM_SCORE_INV = {int(v): k for k, v in FROM_SCORE.items()}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--model", default="gpt-4o-0806")
    parser.add_argument("--calibrate", action="store_true", help="fit thresholds on qwen2.5vl_7b and print them")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--per-task", type=int, default=200, help="seeded sample size per task (0: all items)")
    args = parser.parse_args(argv)
    if args.calibrate:
        result = calibrate(args.data, per_task=args.per_task or None)
        print(json.dumps(result))
        return result
    result = evaluate(args.data, args.model, args.per_task or None)
    print(markdown(result) if args.markdown else json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
