"""Writing a construction run's outputs into its folder: items (JSONL, the format `capeval judge --items` and
sweeps' `items` datasets read), the per-item record (record.parquet), other tables, and construct.json (what ran:
pipeline, mode, pack digest, judges, per-step asks / sent / cached / failed, wall time; credentials redacted as in
run.json, URLs' keys included). Each file is replaced atomically, so a killed run leaves the previous complete
output or none."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pyarrow as pa

from capeval.engine.schemas import ITEMS
from capeval.engine.secrets import redact

from .base import ConstructContext
from .pipeline import PipelineResult


def replace_text(path: Path, text: str) -> None:
    """Write `text` to `path` atomically: a killed writer leaves the previous file or none, never half of one."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def items_jsonl(items: pa.Table) -> str:
    """ITEMS rows as JSONL (options as an array, null columns left out)."""
    lines = []
    for row in items.select([f.name for f in ITEMS if f.name in items.column_names]).to_pylist():
        lines.append(json.dumps({k: v for k, v in row.items() if v is not None}, ensure_ascii=False))
    return "".join(line + "\n" for line in lines)


def write_outputs(out_dir: Path, result: PipelineResult, ctx: ConstructContext, *, started: float,
                  config: dict) -> dict:
    """Write everything; returns the paths written (name -> path)."""
    from capeval.engine.store.segments import write_parquet_atomic  # deferred: the stores (sqlite)

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"items": out_dir / "items.jsonl", "record": out_dir / "record.parquet"}
    replace_text(paths["items"], items_jsonl(result.items))
    write_parquet_atomic(result.record.table(), paths["record"])
    for name, table in result.tables.items():
        paths[name] = out_dir / f"{name}.parquet"
        write_parquet_atomic(table, paths[name])
    record = result.record.table()
    summary = {
        "pipeline": ctx.pipeline, "mode": ctx.mode, "pack": ctx.pack.provenance(),
        "judges": {label: {"name": j.name, "revision": j.revision} for label, j in ctx.judges.items()},
        "roles": ctx.roles, "steps": {name: s.as_dict() for name, s in ctx.stats.items()},
        "items": result.items.num_rows,
        "record_rows": record.num_rows, "notes": result.notes, "config": config,
        "started_at": started, "wall_s": round(time.time() - started, 3),
        "outputs": {k: str(p) for k, p in paths.items()},
    }
    paths["summary"] = out_dir / "construct.json"
    summary = redact(json.loads(json.dumps(summary, default=str)))  # the redaction run.json gets (engine/secrets.py)
    replace_text(paths["summary"], json.dumps(summary, indent=2, sort_keys=True, default=str) + "\n")
    return paths
