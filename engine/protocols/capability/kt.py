"""KT beside F1: QA accuracy, "know but cannot tell" and the caption F1 of the same model, per task and averaged.

    QA accuracy = correct answers / questions                                   (paper Table 6, left number)
    KT = |S_qa(Correct) ∩ (S(Neg) ∪ S(Miss))| / |S_qa(Correct)|                  (paper Eq. 4, Table 6, right number)

both in percent, per task and as the unweighted mean over tasks (as the paper's "Avg." column), with intervals from
the video-clustered bootstrap of metrics.py. A question whose answer could not be read or graded is not correct (it
counts in QA accuracy's denominator, and in n_no_verdict); KT is metrics.know_but_cannot_tell, unchanged.

QA is asked of a captioning model, captions are judged per (captioner, prompt, frame spec) and, in a run folder, per
dataset and judge: `kt_table` computes KT once per caption group, joining the model's QA verdicts by item. The QA
rows are matched to caption groups by captioner label; when each side names exactly one captioner and the names
differ (QA run as "gpt-4o", captions as "gpt-4o-0806") they are joined anyway and the note says so.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from .codes import CapabilityQAVerdict
from .groups import GROUP_COLUMNS, with_groups
from .metrics import task_frame, compute_metrics, know_but_cannot_tell

METRICS = ("f1", "qa_accuracy", "kt")
_NO_CORRECT = "undefined (0/0): no question of this task was answered correctly"
_AVG_UNDEFINED = "undefined: KT is undefined for at least one task (see its row)"
_KEEP = ("task", "metric", "value", "ci_low", "ci_high", "n", "n_no_verdict", "note")
CELL_EXTRA = ("dataset", "judge")  # run-folder verdicts carry these labels; each value is a caption group of its own
_POS, _NEG = 1, 2


def _frame(table) -> pl.DataFrame:
    return table if isinstance(table, pl.DataFrame) else pl.from_arrow(table)


def qa_accuracy_rate(c: np.ndarray, mode: str = "strict") -> np.ndarray:
    """counts [-, correct, wrong, no verdict] -> correct / all questions."""
    return c[..., _POS] / c.sum(axis=-1)


def qa_accuracy(qa_verdicts, *, n_resamples: int = 1000, seed: int = 0, confidence: float = 0.95) -> pl.DataFrame:
    """QA accuracy per (captioner, task) and averaged over tasks, long format (metric "qa_accuracy")."""
    qa = with_groups(_frame(qa_verdicts))
    code = (pl.when(pl.col("verdict") == int(CapabilityQAVerdict.CORRECT)).then(_POS)
            .when(pl.col("verdict") == int(CapabilityQAVerdict.WRONG)).then(_NEG).otherwise(-1))
    df = qa.select(*GROUP_COLUMNS, "task", "item_id", pl.col("video_id").cast(pl.String),
                   pl.col("sub_index").cast(pl.Int32), code.cast(pl.Int8).alias("verdict"),
                   pl.col("parse_status").cast(pl.Int8))
    return task_frame(df, {"qa_accuracy": qa_accuracy_rate}, "strict", n_resamples, seed, confidence)


def _match_captioners(qa: pl.DataFrame, cap: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, str | None]:
    ql = sorted(set(qa["captioner"].to_list()) - {""})
    cl = sorted(set(cap["captioner"].to_list()) - {""})
    if set(ql) & set(cl):
        return qa, cap.filter(pl.col("captioner").is_in(ql)), None
    if len(ql) == 1 and len(cl) == 1:
        note = f"captioner labels differ (QA {ql[0]!r}, captions {cl[0]!r}): joined by item"
        return qa.with_columns(pl.lit(cl[0]).alias("captioner")), cap, note
    raise ValueError(f"KT: the QA answers are of captioner(s) {ql} but the caption verdicts name {cl}; "
                     f"pass the caption verdicts of the model that answered (or its label)")


def _undefined_tasks(kt: pl.DataFrame, tasks: list[str]) -> pl.DataFrame:
    """A task whose questions were all answered wrongly has no KT row from the library (no S_qa(Correct) to count):
    give it a null row saying why, and make the average null, like every average over an undefined task."""
    kt = kt.select(_KEEP)
    missing = [t for t in tasks if t not in set(kt["task"].to_list())]
    if not missing:
        return kt
    avg = pl.col("task") == "avg"
    n_avg = kt.filter(avg)["n"].sum() if kt.height else 0
    defined = kt.filter(~avg)
    null_rows = pl.DataFrame({"task": [*missing, "avg"], "metric": "kt", "value": None, "ci_low": None,
                              "ci_high": None, "n": [0] * len(missing) + [n_avg], "n_no_verdict": 0,
                              "note": [_NO_CORRECT] * len(missing) + [_AVG_UNDEFINED]},
                             schema={c: kt.schema[c] for c in _KEEP})
    return pl.concat([defined, null_rows], how="vertical_relaxed")


def kt_table(qa_verdicts, caption_verdicts, *, mode: str = "official", n_resamples: int = 1000, seed: int = 0,
             confidence: float = 0.95) -> pl.DataFrame:
    """Long rows (metric in f1 / qa_accuracy / kt) per caption group (dataset, judge when present; captioner,
    prompt_set, frame_spec) and task, plus each group's "avg" over tasks. `caption_verdicts`: CAPability VERDICTS
    (a sweep's, capeval judge's, or the released judgments); `mode` is the caption metrics' mode, used for F1 and
    KT alike. Columns: the group columns, task, metric, value, ci_low, ci_high, n, n_no_verdict, qa_frame_spec,
    note."""
    qa = with_groups(_frame(qa_verdicts))
    cap = with_groups(_frame(caption_verdicts))
    if "protocol" in cap.columns and "protocol_name" in cap.columns:
        cap = cap.filter(pl.col("protocol_name") == "capability")
    qa, cap, bridge = _match_captioners(qa, cap)
    qa_frames = ", ".join(sorted(set(qa["frame_spec"].to_list()) - {""}))
    extra = [c for c in CELL_EXTRA if c in cap.columns]
    accuracy = qa_accuracy(qa, n_resamples=n_resamples, seed=seed, confidence=confidence)
    keep = list(_KEEP)
    parts = []
    for key, group in cap.group_by([*extra, *GROUP_COLUMNS], maintain_order=True):
        labels = dict(zip([*extra, *GROUP_COLUMNS], key))
        answers = qa.filter(pl.col("captioner") == labels["captioner"]).with_columns(
            pl.lit(labels["prompt_set"]).alias("prompt_id"), pl.lit(labels["frame_spec"]).alias("frame_spec"))
        if answers.height == 0:
            continue
        caption = group.drop([c for c in extra if c in group.columns])
        kt = _undefined_tasks(know_but_cannot_tell(answers, caption, n_resamples=n_resamples, seed=seed, mode=mode,
                                                   confidence=confidence), answers["task"].unique().to_list())
        f1 = compute_metrics(caption, n_resamples=n_resamples, seed=seed, mode=mode, confidence=confidence)
        acc = accuracy.filter(pl.col("captioner") == labels["captioner"])
        rows = pl.concat([f1.filter(pl.col("metric") == "f1").select(keep), acc.select(keep), kt.select(keep)],
                         how="vertical_relaxed")
        parts.append(rows.with_columns(*[pl.lit(v, pl.String).alias(c) for c, v in labels.items()]))
    if not parts:
        raise ValueError("KT: no caption group of the captioner that answered the questions")
    out = pl.concat(parts, how="vertical_relaxed")
    if bridge:
        out = out.with_columns(pl.when(pl.col("note").is_null()).then(pl.lit(bridge))
                               .otherwise(pl.col("note") + "; " + bridge).alias("note"))
    out = out.with_columns(pl.lit(qa_frames).alias("qa_frame_spec"), pl.lit(mode).alias("mode"))
    cols = [*extra, *GROUP_COLUMNS, *keep[:-1], "qa_frame_spec", "mode", "note"]
    return out.select(cols)


def kt_wide(long: pl.DataFrame) -> pl.DataFrame:
    """One row per (group, task): f1, qa_accuracy, kt with their intervals and n (n_kt: correctly answered questions
    with a caption verdict, KT's denominator), tasks in the paper's order and "avg" last."""
    groups = [c for c in (*CELL_EXTRA, *GROUP_COLUMNS, "task") if c in long.columns]
    out = long.select(*groups).unique(maintain_order=True)
    for m in METRICS:
        part = long.filter(pl.col("metric") == m).select(
            *groups, pl.col("value").alias(m), pl.col("ci_low").alias(f"{m}_ci_low"),
            pl.col("ci_high").alias(f"{m}_ci_high"), pl.col("n").alias(f"n_{m}"))
        out = out.join(part, on=groups, how="left", maintain_order="left")
    notes = long.group_by(groups, maintain_order=True).agg(
        pl.col("note").drop_nulls().unique(maintain_order=True).str.join("; ").alias("note"))
    return out.join(notes, on=groups, how="left", maintain_order="left")


def format_kt_table(table, mode: str = "official") -> str:
    """KT beside F1 and QA accuracy in the terminal (`capeval capability kt`, `capeval construct capability-qa`):
    one block per caption group of `kt_wide` rows."""
    group_cols = [c for c in ("dataset", "judge", "captioner", "prompt_set", "frame_spec") if c in table.columns]
    lines = [f"CAPability KT ({mode} mode; percent, 95% CI from a bootstrap over videos/images; KT lower is better)"]
    for key, g in table.group_by(group_cols, maintain_order=True):
        lines.append("  ".join(f"{c} {v}" for c, v in zip(group_cols, key) if v not in (None, "", "-")))
        head = f"{'dimension':<26}" + "".join(f"{m:>24}" for m in ("f1", "qa_accuracy", "kt")) + f"{'n_kt':>7}"
        lines += [head, "-" * len(head)]
        for r in g.iter_rows(named=True):
            cells = []
            for m in ("f1", "qa_accuracy", "kt"):
                v, lo, hi = r[m], r[f"{m}_ci_low"], r[f"{m}_ci_high"]
                ci = "" if lo is None or hi is None else f" [{lo:5.1f},{hi:5.1f}]"
                cells.append(f"{'-' if v is None else f'{v:6.2f}'}{ci}".rjust(24))
            n = r["n_kt"]
            lines.append(f"{r['task']:<26}" + "".join(cells) + f"{'-' if n is None else n:>7}")
        notes = [f"note: {r['task']}: {r['note']}" for r in g.iter_rows(named=True) if r["note"]]
        lines += notes
    return "\n".join(lines)


__all__ = ["kt_table", "kt_wide", "qa_accuracy", "format_kt_table", "METRICS"]
