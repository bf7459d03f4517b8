"""`vllm-batch`: judge rounds answered offline by vLLM's batch runner, on the node itself, with no server.

Each round's batch file (adapters/batch_files.py: the same lines the OpenAI Batch API gets) is run by

    python -m vllm.entrypoints.openai.run_batch -i IN -o OUT --model MODEL --served-model-name NAME [engine args]

in a child process (one engine start per round; the child dies with its parent). Input, output and the runner's log
stay in `<state>/vllm/`, named by the input's SHA-256: a round whose output is already there (a run killed after the
runner finished) is not run again, and answers downloaded are served from the state like any batch judge's. An
output already collected is never read twice: the same file submitted again holds requests whose answers were
rejected (adapters/batch_rounds.py), so the runner runs it again.

Params: `model` (a local folder or a Hugging Face id), `served_model_name` (the model name in the requests and the
verdicts; default: the folder's name), `engine_args` (vLLM engine options as a table, e.g.
`{max_model_len = 2048, enforce_eager = true}`: each becomes `--max-model-len 2048 --enforce-eager`; a table value is
passed as JSON), `python` (the interpreter whose vLLM runs; default: this one), `run_timeout_s` (default 24 h),
`structured` (default "vllm": choices and JSON schemas as vLLM structured outputs), the batch options of
capeval.adapters.batch_rounds.BatchOptions (`batch_discount` defaults to 0 here: the GPU hour is the price) and the
OpenAI-compatible judge's request options (reasoning_tags, jpeg_quality, prices).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from capeval.adapters.batch_files import BatchLine, file_bytes, file_digest
from capeval.adapters.batch_rounds import BatchJudge, BatchOptions, http_params, round_params
from capeval.adapters.batch_state import TERMINAL, BatchState, abandoned, owner
from capeval.adapters.openai_http import HTTPConfig
from capeval.adapters.vllm_engine import model_revision
from capeval.engine.params import REQUIRED, Param

log = logging.getLogger(__name__)

RUN_BATCH_MODULE = "vllm.entrypoints.openai.run_batch"
_ONE_FILE = 10**9  # the runner takes any size: a round is one file, one engine start


@dataclass
class VLLMBatchOptions:
    engine_args: dict = field(default_factory=dict)
    served_model_name: str | None = None
    python: str | None = None
    run_timeout_s: float = 24 * 3600.0


def engine_flags(args: dict) -> list[str]:
    """`{max_model_len: 2048, enforce_eager: true, x: {..}}` -> ["--max-model-len", "2048", "--enforce-eager",
    "--x", "{..}"]; false leaves a flag out."""
    out: list[str] = []
    for key, value in args.items():
        flag = "--" + str(key).replace("_", "-")
        if value is True:
            out.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, (dict, list)):
            out += [flag, json.dumps(value)]
        else:
            out += [flag, str(value)]
    return out


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Linux: the runner is killed when the process that started it dies (a kill -9 leaves no engine behind)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - other systems: the child outlives a killed parent
        pass


class VLLMBatchJudge(BatchJudge):
    """Judge whose rounds run through `python -m vllm.entrypoints.openai.run_batch` (see the module docstring)."""

    default_batch_discount = 0.0
    params = (Param("model", (), REQUIRED, "a hub id or a local model folder"),
              Param("served_model_name", (str, type(None)), None, "the model name in the batch file (default: the "
                    "folder's name or the hub id)"),
              Param("engine_args", (), None, "a table of vLLM engine options"),
              Param("python", (str, type(None)), None, "the interpreter that runs vLLM's run_batch"),
              Param("run_timeout_s", (float,), 24 * 3600.0, "longest a round's run may take"),
              *round_params(BatchOptions(max_file_requests=_ONE_FILE, max_file_bytes=100 * _ONE_FILE,
                                         batch_discount=0.0)))

    def __init__(self, model: str | os.PathLike, config: HTTPConfig | None = None, *,
                 served_model_name: str | None = None, engine_args: dict | None = None, python: str | None = None,
                 run_timeout_s: float = 24 * 3600.0, state_dir: str | None = None,
                 round_requests: int = BatchOptions.round_requests, max_file_requests: int = _ONE_FILE,
                 max_file_bytes: int = 100 * _ONE_FILE, batch_discount: float = 0.0, wait: bool = True,
                 **overrides):
        model = str(model)
        engine_args = {} if engine_args is None else engine_args
        if not isinstance(engine_args, dict):
            raise ValueError(f"engine_args: expected a table of vLLM engine options, got {engine_args!r}")
        opts = VLLMBatchOptions(engine_args=engine_args, served_model_name=served_model_name, python=python,
                                run_timeout_s=run_timeout_s)
        http = http_params({"structured": "vllm", **overrides})
        served = served_model_name or (Path(model).name if Path(model).is_dir() else model)
        if http.get("revision") is None:
            http["revision"] = model_revision(model)
        base = config or HTTPConfig(model=served)
        cfg = HTTPConfig(**{**base.__dict__, **http, "model": served})
        super().__init__(cfg, BatchOptions(state_dir=state_dir, round_requests=round_requests,
                                           max_file_requests=max_file_requests, max_file_bytes=max_file_bytes,
                                           poll_s=0.0, poll_max_s=0.0, batch_discount=batch_discount, wait=wait))
        self.model, self.vllm = model, opts
        self.provider = f"vllm-run_batch:{served}"

    def where(self) -> str:
        return f"vLLM run_batch ({self.model})"

    def command(self, inp: Path, out: Path) -> list[str]:
        return [self.vllm.python or sys.executable, "-m", RUN_BATCH_MODULE, "-i", str(inp), "-o", str(out),
                "--model", self.model, "--served-model-name", self.name, *engine_flags(self.vllm.engine_args)]

    def _paths(self, state: BatchState, sha: str) -> tuple[Path, Path, Path]:
        folder = state.folder / "vllm"
        folder.mkdir(parents=True, exist_ok=True)
        stem = folder / sha[:40]
        return stem.with_suffix(".in.jsonl"), stem.with_suffix(".out.jsonl"), stem.with_suffix(".log")

    def settle(self, state: BatchState) -> None:
        """Rows of a killed run: adopted when the runner's output is complete on disk, else dropped (sent again)."""
        for row in state.batches(self.provider):
            if row["status"] in ("collected",) + TERMINAL or not abandoned(row):
                continue
            _, out, _ = self._paths(state, row["sha"])
            if out.is_file():
                state.update(row["id"], status="completed", output_file_id=str(out), owner=owner())
            else:
                state.drop(row["id"])

    def submit(self, state: BatchState, chunk: list[BatchLine]) -> int:
        data = file_bytes(chunk)
        sha = file_digest(data)
        inp, out, log_path = self._paths(state, sha)
        local = state.begin(self.provider, sha, [(bl.key, bl.body_sha) for bl in chunk])
        state.update(local, batch_id=f"run_batch-{sha[:12]}", file_id=str(inp), status="in_progress")
        collected = any(r["sha"] == sha for r in state.batches(self.provider, ("collected",)))
        if out.is_file() and not collected:  # this very file was run before (a kill after the runner finished)
            state.update(local, status="completed", output_file_id=str(out))
            return local
        tmp = inp.with_name(inp.name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, inp)
        partial = out.with_name(out.name + ".partial")
        log.info("judge %s: running vLLM's batch runner on %d requests (log: %s)", self.name, len(chunk), log_path)
        env = dict(os.environ)
        env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # the in-process judge's setting is not the runner's
        try:
            with open(log_path, "wb") as logf:
                done = subprocess.run(self.command(inp, partial), stdout=logf, stderr=subprocess.STDOUT, env=env,
                                      timeout=self.vllm.run_timeout_s, preexec_fn=_die_with_parent)
            failed = f"the runner exited with {done.returncode}" if done.returncode else None
        except subprocess.TimeoutExpired:
            failed = f"the runner ran past run_timeout_s ({self.vllm.run_timeout_s:g} s)"
        if failed is None and partial.is_file():
            os.replace(partial, out)
            state.update(local, status="completed", output_file_id=str(out))
        else:
            tail = log_path.read_text(errors="replace")[-600:] if log_path.is_file() else ""
            state.update(local, status="failed", note=f"{failed or 'no output file'}; log {log_path}: ...{tail}")
        return local

    def poll(self, state: BatchState, locals_: list[int]) -> list[int]:
        return list(locals_)  # the runner is done when submit returns

    def fetch(self, state: BatchState, local: int) -> tuple[bytes | None, bytes | None]:
        row = state.batch(local) or {}
        path = row.get("output_file_id")
        return (Path(path).read_bytes() if path and Path(path).is_file() else None), None
