"""What stands behind each number of a run: `capeval show DIR --provenance`.

Users of every peer harness ask which frame options, caption prompt, judge (and its version), judge prompt pack and
mode produced a published number, and find it undocumented. A run folder already holds all of it, spread over
`results.parquet` (the systems) and `run.json` (the sweep file as run, each dataset as read -- path, file and
content digests, items and videos --, component revisions, pack digests, capeval's git revision): this module joins
them into one record per system (dataset, captioner, prompt_id, frame_spec,
protocol, judge, seed), credentials left out (capeval.engine.secrets.without_secrets), so a number can be cited with its
whole recipe.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import polars as pl

from capeval.engine.prompts_library import get_prompt
from capeval.engine.safetext import for_terminal
from capeval.engine.secrets import without_secrets

SYSTEM_COLUMNS = ["dataset", "captioner", "prompt_id", "frame_spec", "protocol", "judge", "seed"]


def _by_display(specs: list[dict]) -> dict[str, dict]:
    return {(s.get("label") or s.get("name")): s for s in specs or []}


def _prompt_record(prompt_id: str, config: dict) -> dict:
    """The caption prompt's text digest (and its text when the sweep defined it), else where it comes from."""
    defined = (config.get("prompt_defs") or {}).get(prompt_id)
    if defined is not None:
        text = json.dumps(defined, sort_keys=True, ensure_ascii=False)
        return {"id": prompt_id, "source": "sweep file", "definition": defined,
                "digest": hashlib.sha256(text.encode()).hexdigest()[:16]}
    try:
        prompt = get_prompt(prompt_id)
    except KeyError:  # a caption file's label, or a prompt this capeval version does not have
        return {"id": prompt_id, "source": "label only (captions read from a file, or an unknown prompt)"}
    return {"id": prompt_id, "source": prompt.source,
            "digest": hashlib.sha256(prompt.key_text.encode()).hexdigest()[:16]}


def _protocol_record(name: str, spec: dict, record: dict) -> dict:
    params = dict(spec.get("params") or {})
    out = {"name": spec.get("name", name), "params": without_secrets(params),
           "mode": (record.get("modes") or {}).get(name, params.get("mode", "strict")),
           "pack_digests": (record.get("pack_digests") or {}).get(name)}
    try:
        from capeval.engine.registry import lookup

        out["version"] = lookup("protocol", spec.get("name", name)).version
    except KeyError:
        out["version"] = None
    return out


def _dataset_record(name, record: dict, configured: dict) -> dict:
    """The dataset as the run read it (run.json's `datasets`: path, file digest, content digest, items and videos
    loaded), else, for a run recorded before that, its sweep-file entry with only the parameters its kind takes
    (a DatasetSpec carries the synthetic kind's defaults for every kind) and a note that nothing was measured."""
    read = (record.get("datasets") or {}).get(name)
    if read is not None:
        return read
    if not configured:
        return {}
    out = {k: v for k, v in configured.items() if v is not None and k not in ("n_videos", "seed", "duration_s")}
    if configured.get("kind") == "synthetic":
        out.update({k: configured[k] for k in ("n_videos", "seed", "duration_s") if k in configured})
    out["note"] = "as configured: this run's record holds no digest or counts of what was read"
    return out


def provenance(run_dir: str | Path) -> list[dict]:
    """One record per system of the run's results: everything its numbers depend on."""
    run_dir = Path(run_dir)
    results_path, record_path = run_dir / "results.parquet", run_dir / "run.json"
    if not results_path.is_file() or not record_path.is_file():
        raise FileNotFoundError(f"{run_dir}: a sweep's run folder holds results.parquet and run.json; "
                                f"{'results.parquet' if not results_path.is_file() else 'run.json'} is missing")
    runs = json.loads(record_path.read_text()).get("runs") or []
    sweeps = [r for r in runs if r.get("command") == "sweep"]
    if not sweeps:
        raise ValueError(f"{record_path}: no sweep run recorded")
    record = sweeps[-1]
    config = record.get("config") or {}
    results = pl.read_parquet(results_path)
    columns = [c for c in SYSTEM_COLUMNS if c in results.columns]
    datasets = {d.get("name"): d for d in config.get("datasets") or []}
    captioners, judges = _by_display(config.get("captioners")), _by_display(config.get("judges"))
    protocols = _by_display(config.get("protocols"))
    components = record.get("components") or {}
    out = []
    for system in results.select(columns).unique(maintain_order=True).sort(columns).to_dicts():
        cap, judge = system.get("captioner"), system.get("judge")
        cap_spec, judge_spec = captioners.get(cap) or {}, judges.get(judge) or {}
        out.append({
            "system": system,
            "dataset": without_secrets(_dataset_record(system.get("dataset"), record,
                                                       datasets.get(system.get("dataset")) or {})),
            "captioner": {"spec": without_secrets(cap_spec) if cap_spec else "captions read from a file",
                          "revision": (components.get("captioners") or {}).get(cap)},
            "caption_prompt": _prompt_record(str(system.get("prompt_id")), config),
            "frames": {"spec": system.get("frame_spec"),
                       "frame_size": cap_spec.get("frame_size"), "timestamps": cap_spec.get("timestamps")},
            "protocol": _protocol_record(str(system.get("protocol")), protocols.get(system.get("protocol")) or {},
                                         record),
            # revision: the weights' identity known before loading (empty for served models: then the model
            # name the params give is what identifies them, and it is in every request key)
            "judge": {"spec": without_secrets(judge_spec),
                      "revision": (components.get("judges") or {}).get(judge) or None,
                      "model": (judge_spec.get("params") or {}).get("model"),
                      "validation": (record.get("judge_validation") or {}).get(judge)},
            "capeval": {**(record.get("capeval") or {}), "version": (record.get("versions") or {}).get("capeval")},
            "run": {"index": record.get("run_index"), "finished_at": record.get("finished_at"),
                    "sweep_file": record.get("sweep_file")},
        })
    return out


def format_provenance(records: list[dict]) -> str:
    """Plain text: one block per system, each line `field: value` (values as compact JSON)."""
    blocks = []
    for r in records:
        head = " | ".join(f"{k}={v}" for k, v in r["system"].items())
        lines = [for_terminal(head)]
        for key in ("dataset", "captioner", "caption_prompt", "frames", "protocol", "judge", "capeval", "run"):
            value = json.dumps(r[key], ensure_ascii=False, sort_keys=True, default=str)
            lines.append(f"  {key}: {for_terminal(value)}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
