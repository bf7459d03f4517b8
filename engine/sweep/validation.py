"""Checks a sweep needs before any work, with the parsers the run itself uses: dataset kinds and their parameters,
dataset tables (read by the kind's own loader: empty, malformed, not UTF-8, conflicting duplicate ids), captioner/judge
parameters against the backend's constructor and their values against its config dataclass (types, its own checks),
protocol params (mode, prompt pack, judge frames), option ranges, caption files, and (for a run) the output folder.
Problems name the file's own entry (`Checker.where`): an entry dropped for a type error does not shift the next.
`validate_config(config, out_dir=None)` returns every problem as one text each (file, line, field); `load_sweep`
runs the same checks, so `--check` and every run (before Ray starts) report them alike.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from capeval.engine.params import REQUIRED, Param, accepted_params
from capeval.engine.sweep.checker import SweepChecker
from capeval.engine.sweep.pairs import PairPlan

#: protocol params understood by every protocol (the rest go to the protocol as they are)
PROTOCOL_MODES = ("strict", "official")


def read_prompts(c, entries: list, base: Path) -> tuple[list[str], dict]:
    """Prompt ids of the sweep and the CaptionPrompts it defines ({id: prompt}); problems go to checker `c`."""
    from capeval.engine.prompts_library import PromptError, builtin_prompts, prompt_from_entry

    builtin = builtin_prompts()
    # a table with only an id names a built-in prompt, as a plain string does (TOML cannot mix both forms)
    entries = [e["id"] if isinstance(e, dict) and set(e) == {"id"} else e for e in entries]
    defined = {}
    for i, e in enumerate(entries):
        if isinstance(e, dict):
            try:
                p = prompt_from_entry(e, base, where=f"prompts[{i}]")
            except PromptError as exc:
                c.fail(f"prompts[{i}]", str(exc).split(": ", 1)[-1], "prompts")
                continue
            if p.id in defined or (p.id in builtin and builtin[p.id].key_text != p.key_text):
                c.fail(f"prompts[{i}].id", f"prompt id {p.id!r} is already taken; choose another id", "id")
                continue
            defined[p.id] = p
    ids = []
    for i, e in enumerate(entries):
        if isinstance(e, str):
            if e not in builtin and e not in defined:
                known = sorted(set(builtin) | set(defined))
                c.fail(f"prompts[{i}]", f"unknown caption prompt {e!r}; known: {', '.join(known)}", "prompts")
            ids.append(e)
        elif isinstance(e, dict):
            if isinstance(e.get("id"), str):
                ids.append(e["id"])
        else:
            c.fail(f"prompts[{i}]", f"expected a prompt id or a table, got {type(e).__name__}", "prompts")
    return ids, defined


def check_config(config, c: SweepChecker, *, check_registry: bool = True,
                 check_paths: bool = True) -> PairPlan | None:
    """Semantic checks of a parsed config; every problem goes to checker `c` (capeval.engine.sweep.checker).
    Returns the pair plan the checks made (engine/sweep/pairs.py `PairPlan`; None without protocols or registry
    checks): the sweep keeps it (`SweepConfig.pairs`) so that its media check and run plan check no pair twice."""
    pairs = None
    from capeval.engine.datasets.registry import validate as validate_dataset

    base = config.path.parent
    names = [d.name for d in config.datasets]
    for i, d in enumerate(config.datasets):
        where = c.where("datasets", i)
        if names.count(d.name) > 1 and names.index(d.name) != i:
            c.fail(f"{where}.name", f"dataset name {d.name!r} is used twice", "name")
        problems = validate_dataset(d.kind, d.kind_params(), base, check_paths=check_paths)
        for problem in problems:
            key, _, msg = problem.partition(": ")
            c.fail(f"{where}.{key}", msg, key)
        if check_paths and not problems and (msg := dataset_table_problem(d, base)):
            key = "path" if "path" in d.kind_params() else "kind"
            c.fail(f"{where}.{key}", msg, key)
    for key, kind in (("captioners", "captioner"), ("judges", "judge"), ("protocols", "protocol")):
        for i, comp in enumerate(getattr(config, key)):
            where = c.where(key, i)
            if check_registry:
                cls, error = _lookup(kind, comp.name)
                if error:
                    c.fail(f"{where}.name", error, "name")
                elif kind != "protocol":
                    for msg in constructor_problems(cls, comp.params, f"{kind} {comp.name!r}"):
                        c.fail(f"{where}.params", msg, "params")
                    for field, msg in param_value_problems(cls, comp.params):
                        c.fail(f"{where}.params.{field}" if field else f"{where}.params", msg, field or "params")
            if comp.max_tokens is not None and comp.max_tokens < 1:
                c.fail(f"{where}.max_tokens", f"must be at least 1, got {comp.max_tokens}", "max_tokens")
    for i, p in enumerate(config.protocols):
        for msg_key, msg in protocol_param_problems(p.params, base, protocol=p.name):
            c.fail(f"{c.where('protocols', i)}.params.{msg_key}", msg, msg_key)
    if check_registry and config.protocols:  # which protocol judges which dataset (engine/sweep/pairs.py)
        from capeval.engine.sweep.pairs import plan_pairs, report_problems

        pairs = plan_pairs(config, read_tables=check_paths)
        report_problems(pairs, c)
    for i, src in enumerate(config.captions if check_paths else ()):
        where = c.where("captions", i)
        if not Path(src.path).is_file():
            c.fail(f"{where}.path", f"caption file not found: {src.path}", "path")
            continue
        try:
            from capeval.engine.inputs import read_captions

            read_captions(src.path, captioner=src.captioner, caption_format=src.format, id_field=src.id_field,
                          keys=False)  # only what the run would refuse: its keys are made when it reads them
        except ValueError as exc:  # UsageError: names file, row and column
            c.fail(f"{where}.path", str(exc), "path")
    from capeval.engine.sweep.prices import check_prices

    check_prices(config, c, check_paths=check_paths)  # price tables and the prices file (engine/sweep/prices.py)
    for name, low, what in (("caption_actors", 1, "at least 1"), ("batch_size", 1, "at least 1"),
                            ("judge_batch_size", 1, "at least 1"), ("n_resamples", 0, "0 (no CIs) or more"),
                            ("max_restarts", 0, "0 or more"), ("judge_actors", 0, "0 (judge in the driver) or more"),
                            ("gpus_per_actor", 0, "0 or more")):
        v = getattr(config.options, name)
        if v < low:
            c.fail(f"options.{name}", f"must be {what}, got {v}", name)
    return pairs


def dataset_table_problem(spec, base: Path) -> str | None:
    """Why the run could not read `spec`'s dataset, read by the run's own loader (engine/inputs: its errors name the
    file, row and column); None when it reads, or when its kind's loader does more than read files
    (`DatasetKind.reads_only` false: synthetic generates videos). --check and every run do this before any work, so
    a table the run would refuse is reported with the sweep file's line. Media files are not looked for here: a
    sweep may be checked on a machine that holds only the tables (the run says which media are missing)."""
    from capeval.engine.sweep.pairs import read_view

    try:
        read_view(spec, base)  # kept for the pair checks below and the grid
    except (ValueError, OSError, KeyError) as exc:  # UsageError is a ValueError
        return str(exc) or type(exc).__name__
    return None


def param_value_problems(cls, params: dict) -> list[tuple[str | None, str]]:
    """(field, message) for captioner/judge params whose values the backend refuses: its declared params
    (engine/params.py: types and ranges); its config dataclass's fields by that dataclass (type annotations; its own
    checks in __post_init__, which raise ValueError naming the field). Each param is tried on its own, so every bad
    value is reported, then all together (checks across fields). Nothing is connected to."""
    out: list[tuple[str | None, str]] = []
    declared = constructor_params(cls)
    for k, v in params.items():
        if k in declared and (msg := declared[k].problem(v)) is not None:
            out.append((k, msg))
    config_cls = getattr(cls, "config_class", None)
    if config_cls is None:
        return out
    known = {f.name: f for f in dataclasses.fields(config_cls)}
    mine = {k: v for k, v in params.items() if k in known and k not in declared}
    for k, v in mine.items():
        wanted = _annotation_types(known[k].type)
        if wanted is not None and not _value_fits(v, wanted):
            names = "/".join("none" if t is type(None) else t.__name__ for t in wanted)
            out.append((k, f"expected {names}, got {type(v).__name__} ({v!r})"))
        elif k == "base_url" and isinstance(v, str) and not v.lower().startswith(("http://", "https://")):
            out.append((k, f"expected an http:// or https:// URL, got {v!r}"))
        elif (msg := _construct(config_cls, {k: v})) is not None:
            out.append((k, msg))
    if not out and len(mine) > 1 and (msg := _construct(config_cls, mine)) is not None:
        out.append((next((k for k in mine if k in msg), None), msg))
    return _without_secret_values(out, params)


def _without_secret_values(problems: list, params: dict) -> list:
    """The problems with a credential's value never shown (a key in `api_key`, in a URL's user or query): these
    messages are printed and may be logged."""
    from capeval.engine.secrets import REDACTED, is_secret_name, redact_message

    out = []
    for key, msg in problems:
        value = params.get(key) if key else None
        if key and is_secret_name(key) and value is not None:
            msg = msg.replace(repr(value), REDACTED).replace(str(value), REDACTED)
        out.append((key, redact_message(msg)))
    return out


def constructor_params(cls) -> dict[str, Param]:
    """{name: capeval.engine.params.Param} of the params the backend class declares (`params`; not its config's
    fields); {} when it declares none."""
    return {p.name: p for p in getattr(cls, "params", None) or ()}


def _construct(config_cls, values: dict) -> str | None:
    try:
        config_cls(**values)
    except (ValueError, TypeError) as exc:
        return str(exc)
    return None


_SIMPLE_TYPES = {"int": int, "float": float, "str": str, "bool": bool, "None": type(None)}


def _annotation_types(annotation) -> tuple[type, ...] | None:
    """The types of a config field's simple annotation ("float", "str | None", ...); None for anything else (not
    checked)."""
    if isinstance(annotation, type):
        return (annotation,)
    if not isinstance(annotation, str):
        return None
    names = [n.strip() for n in annotation.split("|")]
    if not all(n in _SIMPLE_TYPES for n in names):
        return None
    return tuple(_SIMPLE_TYPES[n] for n in names)


def _value_fits(value, types: tuple[type, ...]) -> bool:
    if isinstance(value, bool):
        return bool in types
    if isinstance(value, int) and float in types:
        return True
    return isinstance(value, types)


def protocol_param_problems(params: dict, base: Path, protocol: str | None = None) -> list[tuple[str, str]]:
    """(key, message) for the protocol params capeval itself reads; the params naming prompt packs (the protocol's
    `pack_params`) are made absolute in place (a pack path in a sweep file is relative to the file). Given the
    protocol's name, its declared params are checked too (`JudgeProtocol.params`: a name it does not read, a value
    out of range) and its own checks across params (`JudgeProtocol.check_params`), by the functions the run itself
    uses. Without a (known) name, every registered protocol's
    pack params are checked as packs."""
    from capeval.engine.frames.sampling import FrameSpec, FrameSpecError

    out = []
    mode = params.get("mode", "strict")
    if mode not in PROTOCOL_MODES:
        out.append(("mode", f"expected one of {PROTOCOL_MODES}, got {mode!r}"))
    judged_by = _protocol_or_none(protocol)
    for key in _pack_params(judged_by):
        if key not in params:
            continue
        v = params[key]
        if not isinstance(v, str):
            out.append((key, f"expected a prompt pack path, got {type(v).__name__}"))
        else:
            p = Path(v).expanduser()
            p = p if p.is_absolute() else base / p
            if not p.is_file():
                out.append((key, f"prompt pack not found: {p}"))
            else:
                from capeval.engine.packs import PackError, load_pack

                try:
                    load_pack(p)
                    params[key] = str(p.resolve())
                except PackError as exc:
                    out.append((key, str(exc)))
    if "judge_frames" in params:
        try:
            params["judge_frames"] = str(FrameSpec.parse(params["judge_frames"]))
        except FrameSpecError as exc:
            out.append(("judge_frames", str(exc)))
    if judged_by is not None:  # its declared params (names, values) and its own checks; one problem per param
        reported = {key for key, _ in out}
        out.extend((key, msg) for key, msg in judged_by.check_params(mode, params) if key not in reported)
    return out


def _protocol_or_none(name):
    """The registered protocol called `name`; None without a name or for an unknown one (reported elsewhere; a raw
    sweep file's name may be of any type)."""
    from capeval.engine.registry import lookup

    try:
        return lookup("protocol", name) if name is not None else None
    except (KeyError, TypeError):
        return None


def protocol_pack_params(name) -> tuple[str, ...]:
    """The params of protocol `name` that name a prompt pack (its `pack_params`); without a name, or for a name no
    protocol has, those of every registered protocol (engine/staging.py ships them all)."""
    return _pack_params(_protocol_or_none(name))


def _pack_params(protocol) -> tuple[str, ...]:
    """The params naming prompt packs: the protocol's own, or (no protocol) those of every registered protocol."""
    from capeval.engine.registry import lookup, names

    if protocol is not None:
        return tuple(protocol.pack_params)
    return tuple(dict.fromkeys(k for n in names("protocol") for k in lookup("protocol", n).pack_params))


def _lookup(kind: str, name: str):
    from capeval.engine.registry import lookup

    try:
        return lookup(kind, name), None
    except KeyError as exc:
        return None, str(exc.args[0]) if exc.args else str(exc)


def constructor_problems(cls, params: dict, what: str) -> list[str]:
    named, open_ended = accepted_params(cls)
    out = []
    if not open_ended:
        unknown = sorted(k for k in params if k not in named)
        if unknown:
            valid = ", ".join(sorted(named)) or "none"
            out.append(f"{what} does not accept {', '.join(map(repr, unknown))} (valid: {valid})")
    missing = [n for n, d in named.items() if d is REQUIRED and n not in params]
    if missing:
        out.append(f"{what} needs {', '.join(map(repr, missing))}")
    return out


def writable_problem(folder: str | Path) -> str | None:
    """None when `folder` exists and is writable or can be created; else why not."""
    p = Path(folder).resolve()
    probe = p
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        return f"{p}: {probe} is a file, not a folder"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{p}: not writable ({probe} does not allow writing)"
    return None


def validate_config(config, out_dir: str | Path | None = None, *, check_registry: bool = True,
                    check_paths: bool = True) -> list[str]:
    """Every problem of `config` (and of `out_dir` when given) as "file, line N: field: message"; [] when none."""
    text = config.path.read_text(encoding="utf-8") if config.path.is_file() else ""
    c = SweepChecker(config.path, text)
    check_config(config, c, check_registry=check_registry, check_paths=check_paths)
    if out_dir is not None and (msg := writable_problem(out_dir)):
        c.problems.append(f"output folder {msg}")
    return c.problems
