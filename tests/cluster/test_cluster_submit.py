"""`capeval submit` against a real two-node Ray cluster on 127.0.0.1 (head with the job server + a worker node
joined with `ray start --address`): the sweep file and its items table sit outside the repository with videos
beside them; the job's fetched results equal a local run's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from _ray_cluster import REPO, LocalCluster
from _sweeps import sweep_toml
from capeval.engine.cli.submit import extract_payload, pack_results, stage_sweep, unpack_results

pytestmark = pytest.mark.slow

SWEEP = sweep_toml("submit-test", frames=("uniform:2", "uniform:4"),
                   dataset={"name": "clips", "kind": "items", "path": "../data/items.jsonl"},
                   options={"n_resamples": 50})


@pytest.fixture(scope="module")
def sweep_file(tmp_path_factory) -> Path:
    """Real generated videos and their CapQuiz items in a folder of their own, named by a relative path."""
    from capeval.engine.protocols.capquiz.dataset_kind import load

    root = tmp_path_factory.mktemp("elsewhere")
    loaded = load({"n_videos": 3, "seed": 7, "duration_s": 1.5}, base_dir=root, out_dir=root / "data", name="clips")
    rows = loaded.items.to_pylist()
    for r in rows:  # media paths relative to the table, as a user would write them
        r["media_path"] = os.path.relpath(r["media_path"], root / "data")
    (root / "data" / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "sweeps").mkdir()
    path = root / "sweeps" / "submit_test.toml"
    path.write_text(SWEEP)
    return path


def _env(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update({"PYTHONPATH": os.environ.get("PYTHONPATH", ""), **(extra or {})})
    return env


def test_staging_ships_the_table_and_its_media(sweep_file, tmp_path):
    staged, shipped = stage_sweep(sweep_file, tmp_path / "stage")
    table_src = str((sweep_file.parent.parent / "data" / "items.jsonl").resolve())
    assert len(shipped) == 4 and sum(src == table_src for src, _ in shipped) == 1  # the table and its 3 videos
    rel = next(rel for src, rel in shipped if src == table_src)
    table = tmp_path / "stage" / rel
    rows = [json.loads(line) for line in table.read_text().splitlines()]
    media = {r["media_path"] for r in rows}
    assert len(media) == 3 and all((table.parent / m).is_file() for m in media)
    assert f"path: {rel}" in staged.read_text()


def test_payload_round_trip(tmp_path):
    src = tmp_path / "src"
    (src / "metrics").mkdir(parents=True)
    (src / "metrics" / "a.parquet").write_bytes(b"x" * 10)
    (src / "results.csv").write_text("a,b\n1,2\n")
    (src / "frames").mkdir()  # stays on the cluster
    log = "line before\n" + "\n".join(["@@capeval-results-begin@@",
                                        __import__("base64").b64encode(pack_results(src)).decode(),
                                        "@@capeval-results-end@@"]) + "\n"
    unpack_results(extract_payload(log), tmp_path / "dst")
    assert (tmp_path / "dst" / "results.csv").read_text() == "a,b\n1,2\n"
    assert (tmp_path / "dst" / "metrics" / "a.parquet").stat().st_size == 10
    assert not (tmp_path / "dst" / "frames").exists()


def test_submit_to_a_two_node_cluster_equals_a_local_run(sweep_file, tmp_path, ray_local):
    from capeval.engine.sweep.config import load_sweep
    from capeval.engine.sweep.runner import run_sweep

    local = tmp_path / "local"  # the reference: the same sweep file run here, on the session's local Ray
    run_sweep(load_sweep(sweep_file), local, progress=False, log=lambda m: None)
    cluster = LocalCluster(cpus_per_node=1)
    try:
        assert cluster.alive_nodes() == 2
        # both nodes' servers (GCS, raylets, agents, the client and job servers) listen on loopback only
        sockets = cluster.listening()
        assert {"gcs_server", "raylet"} <= {name for _, name, _, _ in sockets}, sockets
        assert [s for s in sockets if not (s[2].startswith(("127.", "::ffff:127.")) or s[2] == "::1")] == []
        fetched = tmp_path / "fetched"
        forwarded = "fwd-" + os.urandom(12).hex()  # as a credential --forward-env sends: runtime_env only
        proc = subprocess.run([sys.executable, "-m", "capeval.engine.cli", "submit", str(sweep_file), "--address",
                               cluster.dashboard, "--out", str(fetched), "--remote-out", str(tmp_path / "remote"),
                               "--submission-id", "capeval-submit-test", "--forward-env", "CAPEVAL_TEST_FORWARDED"],
                              cwd=tmp_path, env=_env({**cluster.env, "CAPEVAL_TEST_FORWARDED": forwarded}),
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
        # the documented exposure: whoever can read the cluster's job list sees the value (a process of its own,
        # with the cluster's auth token: Ray keeps the token this process's own local Ray loaded)
        query = ("import json, sys; from ray.job_submission import JobSubmissionClient as C; "
                 "print(json.dumps(C(sys.argv[1]).get_job_info('capeval-submit-test').runtime_env))")
        seen = subprocess.run([sys.executable, "-c", query, cluster.dashboard], env=_env(cluster.env),
                              capture_output=True, text=True, timeout=120)
        assert seen.returncode == 0, seen.stderr[-2000:]
        assert json.loads(seen.stdout.splitlines()[-1])["env_vars"] == {"CAPEVAL_TEST_FORWARDED": forwarded}
    finally:
        cluster.stop()
    assert cluster.pids() == []
    # the job's log was streamed (its sweep lines), without the results payload
    assert "[sweep submit-test]" in proc.stderr and "@@capeval-results" not in proc.stderr + proc.stdout
    assert "ships" in proc.stderr and "succeeded" in proc.stdout
    ours, theirs = pl.read_parquet(local / "results.parquet"), pl.read_parquet(fetched / "results.parquet")
    assert theirs.height == ours.height > 0
    assert theirs.equals(ours)
    verdicts = pl.concat([pl.read_parquet(p) for p in sorted((fetched / "verdicts").glob("*.parquet"))])
    assert verdicts["cell_key"].n_unique() == 4 and (verdicts["verdict"] >= 0).all()
    # the job ran from a copy of its inputs beside its results (the shipped table and its videos)
    assert len(list((tmp_path / "remote" / "submitted" / "data").rglob("*.mp4"))) == 3
    assert len((tmp_path / "remote" / "submitted" / "SHIPPED.txt").read_text().splitlines()) == 1 + 4
    # the forwarded value reached no file: not the staged job, the results, the run record or the fetched copy
    assert forwarded not in proc.stdout + proc.stderr
    assert [p for p in tmp_path.rglob("*") if p.is_file() and forwarded.encode() in p.read_bytes()] == []
