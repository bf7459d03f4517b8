"""Runs in the team's tracker (issue 29 item 4): a test sweep with `[options] tracking` writes an MLflow file store and
a W&B offline folder that hold each cell's parameters and headline metrics with their intervals, the run's totals
and its run.json, results.csv and report as artifacts; `capeval export` writes the same from the run folder. Read
back independently: MLflow through its client on the file store, W&B by parsing the offline run files (the
`.wandb` record log: W&B's public API reads only from its server, so it cannot read an offline run).

Nothing leaves the machine: W&B's server URL and the HTTP(S) proxies point at a local listener that must see no
connection, the export runs with a socket guard that refuses any address but loopback, and no credential held by
the environment (W&B's and MLflow's keys, a judge's) is found in any file the trackers wrote."""

from __future__ import annotations

import importlib.util
import json
import secrets
import socket
import struct
import threading
import time
from pathlib import Path

import polars as pl
import pytest

from _sweeps import sweep_toml
from capeval.engine.cli import main as capeval
from capeval.engine.sweep.checker import SweepFileError
from capeval.engine.sweep.config import load_sweep
from capeval.engine.sweep.runner import run_sweep
from capeval.engine.tracking_spec import SPEC_KEYS, TrackingSpec

REPO = Path(__file__).resolve().parents[2]
CELL_PARAMS = ("dataset", "captioner", "prompt_id", "frame_spec", "protocol", "judge", "mode")
HEADLINE = ("CapP", "CapR", "CapF1")


class Listener:
    """A TCP listener on loopback that counts the connections it gets (none is the expected number)."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """Every place W&B and MLflow could write or call made local: W&B offline with its folders under tmp_path,
    telemetry off, W&B's server and the proxies at a counting listener; credentials set to unique values."""
    listener = Listener()
    url = f"http://127.0.0.1:{listener.port}"
    home = tmp_path / "wandb-home"
    env = {"WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path / "wandb-default"),
           "WANDB_CACHE_DIR": str(home / "cache"),
           "WANDB_CONFIG_DIR": str(home / "config"), "WANDB_DATA_DIR": str(home / "data"),
           "WANDB_ARTIFACT_DIR": str(home / "artifacts"), "WANDB_SILENT": "true", "WANDB_BASE_URL": url,
           "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true", "HTTP_PROXY": url, "HTTPS_PROXY": url,
           "http_proxy": url, "https_proxy": url, "NO_PROXY": "", "no_proxy": ""}
    keys = {name: f"{name.lower()}-{secrets.token_hex(16)}" for name in (
        "WANDB_API_KEY", "MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_PASSWORD", "OPENAI_API_KEY",
        "CAPEVAL_JUDGE_API_KEY")}
    for name, value in {**env, **keys}.items():
        monkeypatch.setenv(name, value)
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_ALLOW_FILE_STORE", "WANDB_PROJECT", "WANDB_ENTITY"):
        monkeypatch.delenv(name, raising=False)
    yield listener, keys
    listener.sock.close()


@pytest.fixture
def loopback_only(monkeypatch):
    """Refuse (and record) every socket connection to an address other than loopback or a local socket file."""
    attempts = []
    real = socket.socket.connect

    def connect(self, address):
        host = address[0] if isinstance(address, tuple) else None
        if host is not None and host not in ("127.0.0.1", "::1", "localhost"):
            attempts.append(address)
            raise OSError(f"test: no network ({address})")
        return real(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    return attempts


def mlflow_runs(uri: str, experiment: str, monkeypatch) -> tuple[dict, list]:
    """(the folder's run, the cell runs) of an MLflow file store, read with MLflow's own client."""
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None, f"no experiment {experiment!r} in {uri}"
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if r.data.tags.get("capeval.kind") == "run"]
    assert len(parents) == 1
    parent = parents[0]
    cells = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    run_json = Path(client.download_artifacts(parent.info.run_id, "run.json"))
    return {"params": parent.data.params, "metrics": parent.data.metrics, "artifacts": artifacts,
            "run_json": run_json.read_bytes()}, [{"params": r.data.params, "metrics": r.data.metrics} for r in cells]


def wandb_records(path: Path):
    """The records of one W&B offline run file (`run-<id>.wandb`): W&B's LevelDB-style log -- a 7-byte header
    (":W&B", 0xBEE1, version 0), then 32 KiB blocks of chunks (crc32, length, type: full/first/middle/last), each
    whole record a `wandb_internal_pb2.Record`."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    ident, magic, _ = struct.unpack("<4sHB", data[:7])
    assert ident == b":W&B" and magic == 0xBEE1, f"{path}: not a W&B run file"
    pos, buf, block = 7, b"", 32768
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:
            pos += left
            continue
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        buf = chunk if kind in (1, 2) else buf + chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(buf)
            yield record


def wandb_runs(folder: Path, timeout_s: float = 60.0) -> list[dict]:
    """Each offline run under `folder`: job type, group, config, summary and the files of its artifacts. W&B's service
    process writes a run's transaction log (.wandb) through a buffer it flushes as the run's stream closes, which can
    come after `run.finish()` has returned (seen once under CI's load: a file without its run record yet); the runs
    are read again until each has its run record, for at most `timeout_s`."""
    from google.protobuf.message import DecodeError

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            runs = _read_wandb_runs(folder)
        except (DecodeError, struct.error):  # a record still being written
            if time.monotonic() > deadline:
                raise
        else:
            if all("job_type" in r for r in runs) or time.monotonic() > deadline:
                return runs
        time.sleep(0.5)


def _read_wandb_runs(folder: Path) -> list[dict]:
    runs = []
    for path in sorted(folder.rglob("offline-run-*/run-*.wandb")):
        run = {"config": {}, "summary": {}, "artifacts": set()}
        for record in wandb_records(path):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                run.update(job_type=record.run.job_type, group=record.run.run_group, name=record.run.display_name)
                run["config"].update({i.key: json.loads(i.value_json) for i in record.run.config.update})
            elif kind == "config":
                run["config"].update({i.key: json.loads(i.value_json) for i in record.config.update})
            elif kind == "summary":
                for item in record.summary.update:
                    key = item.key or ".".join(item.nested_key)
                    run["summary"][key] = json.loads(item.value_json)
            elif kind == "artifact":
                run["artifacts"] |= {e.path for e in record.artifact.manifest.contents}
        runs.append(run)
    return runs


def expected_cells(out: Path) -> dict[tuple, dict]:
    """cell labels -> {metric: (value, ci_low, ci_high)} of the overall CapQuiz rows of results.parquet."""
    results = pl.read_parquet(out / "results.parquet").filter(
        (pl.col("family") == "all") & (pl.col("question_type") == "all"))
    cells: dict[tuple, dict] = {}
    for r in results.iter_rows(named=True):
        labels = tuple(str(r[c]) for c in CELL_PARAMS)
        cells.setdefault(labels, {})[r["metric"]] = (r["value"], r["ci_low"], r["ci_high"])
    return cells


def check_cells(logged: list[dict], out: Path) -> None:
    """The logged cells are the results' cells, each with its parameters and headline metrics with intervals."""
    want = expected_cells(out)
    got = {tuple(c["params"][k] for k in CELL_PARAMS): c for c in logged}
    assert set(got) == set(want)
    for labels, metrics in want.items():
        cell = got[labels]
        assert cell["params"]["captioner.name"] == "local" and cell["params"]["judge.name"] == "local"
        assert json.loads(cell["params"]["judge.seeds"]) == [0]
        assert cell["params"]["dataset.kind"] == "synthetic" and cell["params"]["cell_status"] == "complete"
        for m in HEADLINE:
            value, low, high = metrics[m]
            assert cell["metrics"][m] == pytest.approx(value)
            assert cell["metrics"][f"{m}_ci_low"] == pytest.approx(low)
            assert cell["metrics"][f"{m}_ci_high"] == pytest.approx(high)
        assert cell["metrics"]["n"] > 0 and cell["metrics"]["n_no_verdict"] == 0
        assert cell["metrics"]["judge_requests"] > 0 and cell["metrics"]["n_videos"] == 2


def files_holding(folder: Path, needle: str) -> list[str]:
    raw = needle.encode()
    return [str(p) for p in folder.rglob("*") if p.is_file() and not p.is_symlink() and raw in p.read_bytes()]


@pytest.mark.slow
def test_a_sweep_logs_to_an_mlflow_file_store_and_a_wandb_offline_folder(tmp_path, ray_local, offline,
                                                                         monkeypatch, capsys):
    listener, keys = offline
    base = sweep_toml("tracked", n_videos=2, frames=("uniform:2",), options={"n_resamples": 20})
    mlflow_sweep = tmp_path / "mlflow.toml"
    mlflow_sweep.write_text(base + 'tracking = { to = "mlflow", uri = "file:mlruns", experiment = "capeval-test" }\n')
    out = tmp_path / "out"
    lines: list[str] = []
    result = run_sweep(load_sweep(mlflow_sweep), out, progress=False, log=lines.append)
    assert result.exit_code == 0 and result.cells_total == 2
    assert any("logged 2 cell(s) to mlflow" in line for line in lines), lines
    parent, cells = mlflow_runs((tmp_path / "mlruns").as_uri(), "capeval-test", monkeypatch)
    check_cells(cells, out)
    assert parent["params"]["sweep"] == "tracked" and parent["metrics"]["cells"] == 2
    assert parent["metrics"]["items_without_verdict"] == 0
    assert {"run.json", "results.csv", "report.html"} <= parent["artifacts"]
    assert parent["run_json"] == (out / "run.json").read_bytes()

    # the same run folder, every cell cached, logged by the sweep to W&B (offline, its folder beside the sweep file)
    wandb_sweep = tmp_path / "wandb.toml"
    wandb_sweep.write_text(base + 'tracking = { to = "wandb", project = "capeval-test", mode = "offline", '
                                  'dir = "wandb-runs" }\n')
    lines.clear()
    again = run_sweep(load_sweep(wandb_sweep), out, progress=False, log=lines.append)
    assert again.cells_cached == 2 and any("logged 2 cell(s) to wandb" in line for line in lines), lines
    runs = wandb_runs(tmp_path / "wandb-runs")
    cell_runs = [r for r in runs if r["job_type"] == "cell"]
    folder_runs = [r for r in runs if r["job_type"] == "capeval-run"]
    assert len(cell_runs) == 2 and len(folder_runs) == 1
    assert len({r["group"] for r in runs}) == 1  # one group: the run folder
    check_cells([{"params": r["config"], "metrics": r["summary"]} for r in cell_runs], out)
    assert folder_runs[0]["config"]["sweep"] == "tracked" and folder_runs[0]["summary"]["cells"] == 2
    assert {"run.json", "results.csv", "report.html"} <= folder_runs[0]["artifacts"]
    assert not (tmp_path / "wandb-default").exists()  # the sweep's `dir`, not W&B's default folder

    assert listener.connections == 0
    for name, value in keys.items():
        assert files_holding(tmp_path, value) == [], f"{name}'s value was written"


@pytest.mark.slow
def test_capeval_export_logs_a_run_folder_to_either_tracker(tmp_path, ray_local, offline, loopback_only,
                                                            monkeypatch, capsys):
    listener, keys = offline
    sweep = tmp_path / "plain.toml"
    sweep.write_text(sweep_toml("plain", n_videos=2, prompts=("brief",), frames=("uniform:2", "linspace:2"),
                                options={"n_resamples": 20}))
    out = tmp_path / "out"
    run_sweep(load_sweep(sweep), out, progress=False, log=lambda m: None)
    monkeypatch.chdir(tmp_path)
    assert capeval(["export", str(out), "--to", "mlflow", "--uri", "store", "--experiment", "exported"]) == 0
    assert "logged 2 cell(s) to mlflow" in capsys.readouterr().out
    parent, cells = mlflow_runs((tmp_path / "store").as_uri(), "exported", monkeypatch)
    check_cells(cells, out)
    assert {"run.json", "results.csv", "report.html"} <= parent["artifacts"]

    assert capeval(["export", str(out), "--to", "wandb", "--mode", "offline", "--dir", "wb"]) == 0
    printed = capsys.readouterr().out
    assert "logged 2 cell(s) to wandb" in printed and "offline" in printed
    runs = wandb_runs(tmp_path / "wb")
    check_cells([{"params": r["config"], "metrics": r["summary"]} for r in runs if r["job_type"] == "cell"], out)
    assert os_default_untouched(tmp_path)

    assert loopback_only == [] and listener.connections == 0
    for name, value in keys.items():
        assert files_holding(tmp_path, value) == [], f"{name}'s value was written"

    # a tracking server that is not there: exit 4 naming the tracker, in one line
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    assert capeval(["export", str(out), "--to", "mlflow", "--uri", f"http://127.0.0.1:{port}"]) == 4
    err = capsys.readouterr().err
    assert "aborted: mlflow did not take the run" in err and len(err.strip().splitlines()) == 1


def os_default_untouched(tmp_path: Path) -> bool:
    """No ./mlruns or ./wandb appeared in the working directory: each tracker wrote where it was told."""
    return not (tmp_path / "mlruns").exists() and not (tmp_path / "wandb").exists()


def test_export_refuses_what_it_cannot_log(tmp_path, capsys):
    """Exit 2, one line each: not a run folder, another tracker's setting, a URI with credentials, a caption-only
    run (no metrics)."""
    assert capeval(["export", str(tmp_path / "missing"), "--to", "mlflow"]) == 2
    assert "run folder not found" in capsys.readouterr().err
    assert capeval(["export", str(tmp_path), "--to", "wandb", "--uri", "file:x"]) == 2
    assert "--uri: is a setting of mlflow, not of wandb" in capsys.readouterr().err
    assert capeval(["export", str(tmp_path), "--to", "mlflow", "--uri", "https://me:pw@mlflow.example/"]) == 2
    err = capsys.readouterr().err
    assert "holds credentials" in err and "MLFLOW_TRACKING_TOKEN" in err and "pw@" not in err
    assert capeval(["export", str(tmp_path), "--to", "mlflow", "--experiment", " "]) == 2
    assert "--experiment: must not be empty" in capsys.readouterr().err
    (tmp_path / "captions").mkdir()
    (tmp_path / "results.parquet").write_bytes(b"")
    pl.DataFrame({"dataset": ["d"], "captioner": ["c"], "video_id": ["v"], "caption": ["x"]}).write_parquet(
        tmp_path / "results.parquet")
    assert capeval(["export", str(tmp_path), "--to", "mlflow"]) == 2
    assert "no metrics to log" in capsys.readouterr().err


def test_a_missing_extra_is_named(tmp_path, monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in ("mlflow", "wandb")
                        else real(name, *a))
    assert capeval(["export", str(tmp_path), "--to", "mlflow"]) == 2
    assert "pip install 'capeval[mlflow]'" in capsys.readouterr().err
    sweep = tmp_path / "s.toml"
    sweep.write_text(sweep_toml("s") + 'tracking = "wandb"\n')
    with pytest.raises(SweepFileError, match=r"s\.toml, line \d+: options\.tracking: .*pip install 'capeval\[wandb\]'"):
        load_sweep(sweep, check_paths=False)


def _problems(tmp_path: Path, tracking: str, **kw) -> str:
    sweep = tmp_path / "t.toml"
    sweep.write_text(sweep_toml("t", **kw) + f"tracking = {tracking}\n")
    with pytest.raises(SweepFileError) as err:
        load_sweep(sweep, check_paths=False)
    return str(err.value)


def test_sweep_file_tracking_problems_name_file_line_and_field(tmp_path):
    line = len(sweep_toml("t").splitlines()) + 1  # the tracking line, appended under [options]
    assert f"t.toml, line {line}: options.tracking: must be one of 'mlflow', 'wandb', got 'neptune'" in _problems(
        tmp_path, '"neptune"')
    text = _problems(tmp_path, '{ to = "wandb", uri = "file:x", colour = "red" }')
    assert f"line {line}: options.tracking.uri: is a setting of mlflow, not of wandb" in text
    assert f"line {line}: options.tracking.colour: unknown key 'colour'" in text
    assert "options.tracking.mode: must be one of 'online', 'offline', got 'later'" in _problems(
        tmp_path, '{ to = "wandb", mode = "later" }')
    assert "options.tracking.uri: holds credentials" in _problems(
        tmp_path, '{ to = "mlflow", uri = "https://mlflow.example/?token=abc123" }')
    assert "options.tracking: expected str/dict, got int" in _problems(tmp_path, "3")
    assert "options.tracking: a caption-only sweep has no metrics to log" in _problems(
        tmp_path, '"mlflow"', protocols=(), judges=())


def test_tracking_paths_are_the_sweep_files(tmp_path):
    (tmp_path / "sub").mkdir()
    sweep = tmp_path / "sub" / "t.toml"
    sweep.write_text(sweep_toml("t") + 'tracking = { to = "mlflow", uri = "file:runs/ml", experiment = "e" }\n')
    spec = load_sweep(sweep, check_paths=False).options.tracking
    assert spec == TrackingSpec("mlflow", uri=(tmp_path / "sub" / "runs" / "ml").as_uri(), experiment="e")
    sweep.write_text(sweep_toml("t") + 'tracking = { to = "wandb", dir = "wb", project = "p", mode = "offline" }\n')
    spec = load_sweep(sweep, check_paths=False).options.tracking
    assert spec == TrackingSpec("wandb", project="p", mode="offline", dir=str(tmp_path / "sub" / "wb"))
    sweep.write_text(sweep_toml("t") + 'tracking = { to = "mlflow", uri = "http://mlflow.internal:5000" }\n')
    assert load_sweep(sweep, check_paths=False).options.tracking.uri == "http://mlflow.internal:5000"


def test_the_docs_name_every_tracking_setting_and_export_option():
    text = (REPO / "docs" / "tracking.md").read_text(encoding="utf-8")
    missing = [k for k in SPEC_KEYS if f"`{k}`" not in text]
    assert not missing, f"docs/tracking.md: settings not documented: {missing}"
    for option in ("--to", "--uri", "--experiment", "--project", "--entity", "--mode", "--dir"):
        assert f"`{option}" in text, option
    assert "_ci_low" in text and "_ci_high" in text


def test_logged_parameters_hold_no_credential_even_from_an_unredacted_record(tmp_path):
    """A run.json written without redaction (by hand, or an older capeval) still logs no key: every parameter passes
    through capeval.engine.secrets.redact; a variable's name (`api_key_env`) is kept. Intervals are their own
    metrics, an undefined value is left out rather than logged as a number."""
    from capeval.engine.report.tracking import run_content

    key = "sk-tracking-" + secrets.token_hex(12)
    cell = {"dataset": "d", "captioner": "cap", "prompt_id": "p", "frame_spec": "uniform:2", "protocol": "capquiz",
            "judge": "openai", "mode": "strict", "cell_status": "complete", "n": 4, "n_no_verdict": 0, "reason": None}
    pl.DataFrame([{**cell, "metric": "CapF1", "value": 50.0, "ci_low": 40.0, "ci_high": 60.0},
                  {**cell, "metric": "CapP", "value": None, "ci_low": None, "ci_high": None,
                   "reason": "undefined: 0/0"},
                  {**cell, "metric": "CapR", "value": 25.0, "ci_low": 20.0, "ci_high": 30.0}]).write_parquet(
        tmp_path / "results.parquet")
    judge = {"name": "openai", "params": {"model": "m", "api_key": key, "api_key_env": "MY_KEY"}, "seeds": [0]}
    (tmp_path / "run.json").write_text(json.dumps({"runs": [{"command": "sweep", "config": {
        "name": "handmade", "judges": [judge], "captioners": [{"name": "cap", "params": {"token": key}}]}}]}))
    content = run_content(tmp_path, tmp_path / "scratch")
    (only,) = content.cells
    assert only.params["judge.params.api_key"] == "***REDACTED***"
    assert only.params["judge.params.api_key_env"] == "MY_KEY"
    assert only.params["captioner.params.token"] == "***REDACTED***"
    assert key not in json.dumps([only.params, content.params])
    assert (only.metrics["CapF1"], only.metrics["CapF1_ci_low"], only.metrics["CapF1_ci_high"]) == (50.0, 40.0, 60.0)
    assert "CapP" not in only.metrics and "CapP_ci_low" not in only.metrics
    assert content.name == "handmade"
