"""The option values every judging command checks the same way: a protocol's params (checked like a sweep's
`protocols[].params`), the parameters a function takes, and an output path that can be written (checked before
anything runs)."""

from __future__ import annotations

from pathlib import Path

from capeval.engine.errors import UsageError
from capeval.engine.params import key_values
from capeval.engine.sweep.validation import protocol_param_problems, writable_problem


def protocol_params(protocol: str, param_pairs: list[str], mode: str | None, prompts: Path | None) -> dict:
    """Protocol params from --param pairs, --mode and --prompts, checked like a sweep's protocols[].params."""
    params = key_values(param_pairs, "--param")
    if mode:
        params["mode"] = mode
    if prompts:
        params["prompts"] = str(prompts)
    problems = protocol_param_problems(params, Path.cwd(), protocol=protocol)
    if problems:
        raise UsageError("; ".join(f"--param {k}: {m}" if k not in ("mode", "prompts") else f"--{k}: {m}"
                                   for k, m in problems))
    return params


def check_out(path: Path, flag: str = "--out") -> None:
    """A UsageError naming `flag` when `path` is a folder or cannot be written (checked before judging)."""
    if path.is_dir():
        raise UsageError(f"{flag} {path}: is a folder; name the file to write")
    problem = writable_problem(path.parent)
    if problem:
        raise UsageError(f"{flag} {path}: cannot be written: {problem}")
