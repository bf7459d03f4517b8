"""CAPability's section of the HTML report (`CapabilityProtocol.report_sections`): for a run folder with
CAPability-QA results (`capeval construct capability-qa --out RUN/capability_qa`), the caption F1, QA accuracy and KT
("know but cannot tell", lower is better) side by side per caption group and task, with their intervals. The table
is read from the pipeline's kt.parquet (long metrics: f1 / qa_accuracy / kt per group and task)."""

from __future__ import annotations

import html
from pathlib import Path

import polars as pl

from capeval.engine.protocols.base import ReportSection

QA_FOLDER = "capability_qa"  # where the run's CAPability-QA outputs live
KT_FILE = "kt.parquet"
_METRICS = (("f1", "F1"), ("qa_accuracy", "QA accuracy"), ("kt", "KT"))
_GROUPS = ("dataset", "judge", "captioner", "prompt_set", "frame_spec")


def _e(x) -> str:
    return html.escape("" if x is None else str(x))


def _cell(r: dict, m: str) -> str:
    v = r.get(m)
    if v is None:
        return "<td class='num'>–</td>"
    lo, hi = r.get(f"{m}_ci_low"), r.get(f"{m}_ci_high")
    ci = "" if lo is None or hi is None else f" <span class='ci'>[{lo:.1f}, {hi:.1f}]</span>"
    return f"<td class='num'>{v:.1f}{ci}</td>"


def load_kt(run_path: str | Path) -> pl.DataFrame | None:
    """The run's KT table (long), or None when the run has no CAPability-QA results."""
    path = Path(run_path) / QA_FOLDER / KT_FILE
    return pl.read_parquet(path) if path.is_file() else None


def _wide(long: pl.DataFrame) -> pl.DataFrame:
    groups = [c for c in (*_GROUPS, "task") if c in long.columns]
    out = long.select(groups).unique(maintain_order=True)
    for m, _ in _METRICS:
        part = long.filter(pl.col("metric") == m).select(
            *groups, pl.col("value").alias(m), pl.col("ci_low").alias(f"{m}_ci_low"),
            pl.col("ci_high").alias(f"{m}_ci_high"), pl.col("n").alias(f"n_{m}"))
        out = out.join(part, on=groups, how="left", maintain_order="left")
    return out


def kt_section(run_path: str | Path) -> ReportSection | None:
    """The KT section, or None when the run has no CAPability-QA results."""
    long = load_kt(run_path)
    if long is None or long.height == 0:
        return None
    table = _wide(long)
    groups = [c for c in _GROUPS if c in table.columns]
    parts = []
    for key, g in table.group_by(groups, maintain_order=True):
        title = " · ".join(f"{c} {v}" for c, v in zip(groups, key) if v not in (None, "", "-"))
        head = "".join(f"<th>{_e(h)}</th>" for h in ("task", *(label for _, label in _METRICS), "n (KT)"))
        body = "".join(
            f"<tr><td>{_e(r['task'])}</td>{''.join(_cell(r, m) for m, _ in _METRICS)}"
            f"<td class='num'>{_e(r['n_kt'])}</td></tr>" for r in g.iter_rows(named=True))
        parts.append(f"<h3>{_e(title)}</h3><table class='kt'><thead><tr>{head}</tr></thead><tbody>{body}</tbody>"
                     f"</table>")
    notes = long.filter(pl.col("note").is_not_null()).select("task", "metric", "note").unique(maintain_order=True)
    parts += [f"<p class='note'>{_e(r['task'])} {_e(r['metric'])}: {_e(r['note'])}</p>"
              for r in notes.head(20).iter_rows(named=True)]
    mode = long["mode"][0] if "mode" in long.columns else ""
    qa_frames = long["qa_frame_spec"][0] if "qa_frame_spec" in long.columns else ""
    parts.append(f"<p class='note'>Percent, 95% intervals from a bootstrap over videos/images. QA accuracy: "
                 f"questions the captioning model answered correctly (asked with {_e(qa_frames)}). KT (paper Eq. 4): "
                 f"among those, the share its caption got wrong or left out; lower is better. F1 and KT use the "
                 f"caption verdicts in {_e(mode)} mode.</p>")
    return ReportSection(anchor="kt", title="CAPability KT", html="".join(parts))
