"""run.json: one record per run, appended (never replaced), with versions, config and counts; a broken file is
an error naming it."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from capeval.engine.runrecord import append_run_record, read_run_records, verdict_status_counts


@dataclass(frozen=True)
class _Cfg:
    name: str
    frames: tuple


def test_rerun_appends_a_record(tmp_path):
    first = append_run_record(tmp_path, command="sweep", config=_Cfg("demo", ("uniform:2",)),
                              components={"judges": {"local": "rev1"}}, modes={"capquiz": "strict"},
                              pack_digests={"capquiz": "abc"}, counts_by_status={"cells": {"run": 4}}, wall_s=1.5,
                              throughput={"cells_per_s": 2.7})
    append_run_record(tmp_path, command="sweep", config={"name": "demo"}, counts_by_status={"cells": {"cached": 4}},
                      wall_s=0.2)
    runs = json.loads(first.read_text())["runs"]
    assert [r["run_index"] for r in runs] == [0, 1]
    assert runs[0]["config"] == {"name": "demo", "frames": ["uniform:2"]}
    assert runs[0]["components"]["judges"] == {"local": "rev1"} and runs[0]["pack_digests"] == {"capquiz": "abc"}
    assert runs[1]["counts_by_status"] == {"cells": {"cached": 4}} and runs[1]["wall_s"] == 0.2
    assert runs[0]["versions"]["polars"] and runs[0]["versions"]["numpy"]
    assert read_run_records(tmp_path) == runs
    assert not list(tmp_path.glob(".*tmp"))


def test_broken_record_names_the_file(tmp_path):
    (tmp_path / "run.json").write_text("{not json")
    with pytest.raises(ValueError, match="run.json"):
        append_run_record(tmp_path, command="sweep")


def test_status_counts():
    import pyarrow as pa

    table = pa.table({"parse_status": pa.array([0, 0, 1, 2, 4], pa.int8())})
    assert verdict_status_counts(table) == {"ok": 2, "repaired": 1, "failed": 1, "missing": 1}
