"""Sweep files: which datasets, captioners, prompts, frame specs, protocols and judges to cross.

A sweep file is TOML (read with tomllib) or YAML. Validation is strict and reports EVERY problem at once, each
naming the file, the line (where it can be found) and the field: unknown keys, wrong types, frame specs (parsed by
the same parser the run uses), option ranges, dataset kinds and their parameters, each captioner's and judge's
parameters against what the backend's constructor accepts, paths that must exist (engine/sweep/validation.py).
Every option is documented in docs/inputs.md.

    name = "demo"
    prompts = ["detailed", "brief"]              # built-in ids (capeval list prompts) or tables, see below
    frames = ["uniform:4", 8, "linspace:32"]      # sampling specs; an int N means "uniform:N"

    [[datasets]]
    name = "shapes"
    kind = "synthetic"      # synthetic | items | videos | a benchmark's own kind (capeval list kinds)
    n_videos = 6            # the kind's own parameters (capeval list kinds)
    limit = 10              # optional: only the first N videos

    [[captioners]]
    name = "local"          # registry name
    params = {}             # constructor keyword arguments
    max_tokens = 2048       # optional caption length per request
    timestamps = "none"     # "none": the prompt as written (default); "text": frame times appended to it
    frame_size = "max768"   # optional decode size (docs/frames.md); default: the model family's processor size

    [[captions]]            # captions already written (JSONL/CSV/Parquet): a caption cell without captioning
    path = "captions/qwen.jsonl"
    dataset = "shapes"      # optional (default: every dataset); captioner/prompt_id/frame_spec: labels
    format = "lmms-eval"    # optional: another tool's output (lmms-eval | vlmevalkit | inspect; default capeval)
    id_field = "doc.video_id"   # optional, with format: the record field naming the video (default: the tool's id)

    [[protocols]]           # optional: no protocol = a caption-only sweep
    name = "<protocol>"     # a registered protocol (capeval list protocols)
    params = { mode = "official", prompts = "../shared/protocols/<protocol>.toml" }   # the params it declares
    datasets = ["shapes"]   # optional: the datasets it judges (default: every one it can read; engine/sweep/pairs.py)

    [[judges]]
    name = "local"
    seeds = [0]
    prices = { input = 2.5, cached_input = 1.25, output = 10.0 }   # optional, USD per 1M tokens (also captioners)
    validated = "local-vs-gpt4t.json"   # optional: `capeval judge validate --out` file, shown in run.json and report

    [options]
    caption_actors = 1      # caption actors (one per GPU on GPU nodes)
    batch_size = 4          # accepted, no effect: each caption actor streams its captioner's max_in_flight window
    n_resamples = 200       # bootstrap resamples for the metrics' confidence intervals
    prices = "prices.toml"  # optional: prices by judge/captioner name or model (engine/sweep/prices.py)
    breakdowns = ["task"]   # optional: metrics per level of item attributes too (docs/breakdowns.md)
    tracking = "mlflow"     # optional: log the run to MLflow or W&B when it finishes (docs/tracking.md)

Prompts are ids or tables in the same `prompts` array (`[[prompts]]` in TOML): `{id, text}` (the user's text,
optional `image` variant), `{id, file}`, or `{id, pack, video, image}` (texts read from a prompt pack).
"""

from __future__ import annotations

import tomllib
import types
import typing
from dataclasses import MISSING, dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any

from capeval.engine.inputs.tool_formats import format_problem, tool_captioner_label
from capeval.engine.tracking_spec import SPEC_KEYS, TrackingSpec, spec_problems
from capeval.engine.sweep.checker import SweepChecker, SweepFileError, as_tuple, type_ok
from capeval.engine.sweep.pairs import PairPlan
from capeval.engine.sweep.validation import check_config, read_prompts
from capeval.engine.gc_thresholds import bulk_gc


# The dataclasses below are the sweep file's schema: each field is a key of its table, written as its annotation
# says (`file_keys`: tuples as lists, `X | None` as X, a float field takes an int too); a field's metadata says when it
# is no key of the file (`file=False`), which tables of a shared class take it (`tables`) or what the file may write
# instead of the stored type (`file_type`). docs/inputs.md documents every key (tests/sweep/test_schema.py checks).
NOT_IN_FILE = {"file": False}


def _only(*tables: str, **metadata) -> dict:
    return {"tables": tables, **metadata}


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    kind: str  # a registered dataset kind (engine/datasets/registry.py)
    limit: int | None = None
    # the kind's own parameters: every other key of the table, as written
    params: dict = field(default_factory=dict, hash=False, compare=False, metadata=NOT_IN_FILE)

    def kind_params(self) -> dict:
        """The parameters the kind's loader receives: the table's own keys besides name, kind and limit."""
        return dict(self.params)


@dataclass(frozen=True)
class ComponentSpec:
    """A captioner, protocol or judge: a registry name, constructor params and (judges) the seeds to run."""

    name: str
    params: dict = field(default_factory=dict, hash=False)
    seeds: tuple[int, ...] = field(default=(0,), metadata=_only("judges"))
    label: str | None = None  # how it shows in the results table; defaults to the name
    # captioners: caption length per request (None: the stage's default)
    max_tokens: int | None = field(default=None, metadata=_only("captioners"))
    # captioners: "none" sends the prompt as written; "text" appends the frame times
    timestamps: str = field(default="none", metadata=_only("captioners"))
    # captioners: decode size text (capeval.engine.frames.sizes; the file may give a number); None: family default
    frame_size: str | None = field(default=None, metadata=_only("captioners", file_type=(int, str)))
    # protocols: the datasets it judges (None: every one it can read)
    datasets: tuple[str, ...] | None = field(default=None, metadata=_only("protocols"))
    # protocols: the judges (names or labels) that judge it (None: every judge); checked against [[judges]]
    judges: tuple[str, ...] | None = field(default=None, metadata=_only("protocols"))
    # judges, captioners: USD per million tokens {input, cached_input, output} (engine/sweep/prices.py); no effect
    # on results, so neither on keys nor on equality
    prices: dict | None = field(default=None, hash=False, compare=False, metadata=_only("judges", "captioners"))
    # judges: a `capeval judge validate --out` file (absolute), shown in run.json and the report; not in any key
    validated: str | None = field(default=None, hash=False, compare=False, metadata=_only("judges"))

    @property
    def display(self) -> str:
        return self.label or self.name

    def judged_by(self, judge: "ComponentSpec") -> bool:
        """Whether this protocol is judged by `judge` (its `judges` name the judge's label or name; none: all)."""
        return self.judges is None or judge.display in self.judges or judge.name in self.judges


@dataclass(frozen=True)
class CaptionSource:
    """`[[captions]]`: captions read from a file instead of captioned; one caption cell per dataset it serves."""

    path: str  # absolute
    dataset: str | None = None  # None: every dataset
    captioner: str | None = None  # label; default: the file's `captioner` column or its name
    prompt_id: str = "file"
    frame_spec: str = "file"
    # another tool's output file (capeval.engine.inputs.tool_formats); None: capeval's own caption table
    format: str | None = None
    id_field: str | None = None  # with `format`: the dotted record field that names the video

    def label(self) -> str:
        """The captioner label of this source's caption cell: `captioner`, else the model the tool's file names,
        else the file's name."""
        if self.captioner:
            return self.captioner
        if self.format not in (None, "capeval"):
            try:
                return tool_captioner_label(self.path, self.format)
            except (OSError, ValueError):  # an unreadable file: validation reports it, naming file and row
                pass
        return Path(self.path).stem


@dataclass(frozen=True)
class SweepOptions:
    caption_actors: int = 1
    batch_size: int = 4  # no effect: caption actors stream single requests, never batches
    gpus_per_actor: float = 0.0  # 0 on CPU machines; 1 on GPU nodes (one actor per GPU)
    n_resamples: int = 200
    judge_batch_size: int = 64
    max_restarts: int = 3
    # 0: the judge runs in the sweep driver (local judge, HTTP judges); N: a pool of N Ray actors
    # (capeval.adapters.ray_pool.JudgePool), e.g. one vLLM engine per GPU; GPUs per actor follow tensor_parallel_size.
    judge_actors: int = 0
    # warn (once, then each further 10 points) when this share of a judge's finished requests failed (judging/live.py)
    warn_failure_share: float = 0.05
    # true: a cell's judging starts with its first captions and grows as more are made (engine/sweep/overlap.py);
    # false: every caption first, then the judging (stage after stage; the same results, later)
    overlap: bool = True
    prices: str | None = None  # a prices file (engine/sweep/prices.py), relative to the sweep file
    # item attributes each cell's metrics are also broken down by (engine/metrics/breakdowns.py; docs/breakdowns.md)
    breakdowns: tuple[str, ...] = ()
    # comparisons decided with fewer judge calls: videos judged in rounds (engine/sweep/decide.py; docs/statistics.md);
    # a table in the file, kept as a decide.DecideSpec
    decide: Any = field(default=None, metadata={"file_type": dict})
    # log the finished run to a tracker (engine/report/tracking.py; docs/tracking.md): "mlflow", "wandb" or a table
    # {to, uri, experiment, project, entity, mode, dir}, kept as a tracking.TrackingSpec
    tracking: Any = field(default=None, metadata={"file_type": (str, dict)})


@dataclass(frozen=True)
class SweepConfig:
    name: str
    path: Path = field(metadata=NOT_IN_FILE)
    datasets: tuple[DatasetSpec, ...]
    captioners: tuple[ComponentSpec, ...] = ()
    prompts: tuple[str, ...] = ()  # prompt ids; texts via capeval.engine.prompts_library.get_prompt (or prompt_defs)
    frames: tuple[str, ...] = ()
    protocols: tuple[ComponentSpec, ...] = ()  # empty: a caption-only sweep
    judges: tuple[ComponentSpec, ...] = ()
    options: SweepOptions = SweepOptions()
    captions: tuple[CaptionSource, ...] = ()
    # id -> CaptionPrompt (this file's `prompts` tables)
    prompt_defs: dict = field(default_factory=dict, hash=False, compare=False, metadata=NOT_IN_FILE)
    # the pair plan of the file's checks (engine/sweep/pairs.py PairPlan), handed to the media check and the run's
    # grid so that no protocol checks the same table twice
    pairs: PairPlan | None = field(default=None, hash=False, compare=False, repr=False, metadata=NOT_IN_FILE)

    @property
    def caption_only(self) -> bool:
        return not self.protocols


def file_keys(cls: type, table: str | None = None) -> dict[str, tuple[type | tuple[type, ...], bool]]:
    """key -> (the types the file may write it as, required) of the sweep-file table `cls` describes; `table`:
    which table of a class shared by several (ComponentSpec: "captioners", "judges" or "protocols")."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in fields(cls):
        meta = f.metadata
        if meta.get("file") is False or (table is not None and table not in meta.get("tables", (table,))):
            continue
        required = f.default is MISSING and f.default_factory is MISSING
        out[f.name] = (meta.get("file_type") or _file_type(hints[f.name]), required)
    return out


def _file_type(annotation) -> type | tuple[type, ...]:
    """How a field of this annotation is written in TOML/YAML."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        written = [_file_type(a) for a in typing.get_args(annotation) if a is not type(None)]
        return written[0] if len(written) == 1 else tuple(written)
    if annotation is tuple or origin is tuple:
        return list
    if annotation is dict or origin is dict or is_dataclass(annotation):
        return dict
    if annotation is float:
        return (int, float)
    return annotation


CAPTION_TIMESTAMPS = ("none", "text")  # capeval.engine.stages.caption_worker.TIMESTAMP_MODES
_TOP = file_keys(SweepConfig)
_DATASET_COMMON = file_keys(DatasetSpec)
_CAPTIONER = file_keys(ComponentSpec, "captioners")
_JUDGE = file_keys(ComponentSpec, "judges")
_PROTOCOL = file_keys(ComponentSpec, "protocols")
_CAPTIONS = file_keys(CaptionSource)
_OPTIONS = file_keys(SweepOptions)


@bulk_gc()
def load_sweep(path: str | Path, *, check_registry: bool = True, check_paths: bool = True) -> SweepConfig:
    """Read and validate a sweep file; raises SweepFileError listing every problem with file, field and line."""
    path = Path(path)
    if not path.is_file():
        raise SweepFileError(f"sweep file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        from capeval.engine.inputs.rows import not_utf8

        raise SweepFileError(str(not_utf8(path) or f"{path}: not UTF-8 text; save the file as UTF-8")) from None
    if path.suffix == ".toml":
        try:
            raw = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise SweepFileError(f"{path}: invalid TOML: {exc}") from None
    elif path.suffix in (".yaml", ".yml"):
        import yaml

        try:
            raw = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise SweepFileError(f"{path}: invalid YAML: {exc}") from None
    else:
        raise SweepFileError(f"{path}: sweep files are .toml, .yaml or .yml")
    return parse_sweep(raw, path=path, text=text, check_registry=check_registry, check_paths=check_paths)


def parse_sweep(raw: Any, *, path: Path, text: str = "", check_registry: bool = True,
                check_paths: bool = True) -> SweepConfig:
    c = SweepChecker(path, text)
    if not isinstance(raw, dict):
        c.fail("top level", f"expected a table of settings, got {type(raw).__name__}")
        c.raise_problems()
    c.table(raw, _TOP, "")  # problems are collected; everything else is still checked
    raw = {k: v for k, v in raw.items() if k not in _TOP or type_ok(v, _TOP[k][0])}
    if isinstance(raw.get("name"), str) and (msg := name_problem(raw["name"])):
        c.fail("name", msg, "name")
    base = path.parent
    parsed = [(i, _dataset(c, d, f"datasets[{i}]", base, check_paths))
              for i, d in enumerate(raw.get("datasets") or [])]
    datasets = [s for _, s in parsed if s]
    c.positions["datasets"] = [i for i, s in parsed if s]
    captioners = _components(c, raw, "captioners", _CAPTIONER)
    protocols = _components(c, raw, "protocols", _PROTOCOL)
    judges = _components(c, raw, "judges", _JUDGE)
    for i, j in enumerate(judges if check_paths else ()):  # judges[].validated names a file that must exist
        if j.validated and not Path(j.validated).is_file():
            c.fail(f"{c.where('judges', i)}.validated", f"file not found: {j.validated}", "validated")
    prompt_ids, prompt_defs = read_prompts(c, raw.get("prompts") or [], base)
    frames = []
    for i, f in enumerate(raw.get("frames") or []):
        frames.append(_frame_spec(c, f, f"frames[{i}]"))
    captions = _captions(c, raw.get("captions") or [], base, {d.name for d in datasets})
    options = SweepOptions(**{k: v for k, v in (raw.get("options") or {}).items() if k in _OPTIONS
                              and type_ok(v, _OPTIONS[k][0])}) if isinstance(raw.get("options"), dict) else SweepOptions()
    if isinstance(raw.get("options"), dict):
        c.table(raw["options"], _OPTIONS, "options")
    if options.breakdowns:  # a list of attribute names, kept as a tuple (the options are hashed)
        bad = [b for b in options.breakdowns if not isinstance(b, str) or not b.strip()]
        if bad:
            c.fail("options.breakdowns", f"expected item attribute names (strings), got {bad!r}", "breakdowns")
        options = replace(options, breakdowns=tuple(dict.fromkeys(b.strip() for b in options.breakdowns
                                                                  if isinstance(b, str) and b.strip())))
    if options.decide is not None:  # a table, kept as a frozen DecideSpec (the options are hashed)
        from capeval.engine.sweep.decide import parse_decide

        options = replace(options, decide=parse_decide(c, options.decide))
    if options.tracking is not None:  # a tracker's name or a table, kept as a frozen TrackingSpec
        options = replace(options, tracking=_tracking(c, options.tracking, base, caption_only=not protocols))
    if not 0 <= options.warn_failure_share <= 1:
        c.fail("options.warn_failure_share",
               f"must be a share from 0 to 1 (0.05: 5%), got {options.warn_failure_share}", "warn_failure_share")
    if not raw.get("datasets"):
        c.fail("datasets", "must not be empty", "datasets")
    if not captioners and not captions:
        c.fail("captioners", "a sweep needs [[captioners]] or [[captions]] (captions from files)", "captioners")
    if captions and not captioners and not protocols:
        c.fail("captions[0]", "nothing to do: captions read from files are only judged, and this sweep has no "
                              "[[protocols]] (add [[protocols]] and [[judges]] to judge them, or [[captioners]] to "
                              "caption)", "captions")
    if captioners and not prompt_ids:
        c.fail("prompts", "captioners need at least one prompt", "prompts")
    if captioners and not frames:
        c.fail("frames", "captioners need at least one frame spec", "frames")
    if protocols and not judges:
        c.fail("judges", "protocols need at least one judge", "judges")
    check_protocol_judges(c, protocols, judges)
    if judges and not protocols and "protocols" in raw:
        c.fail("protocols", "judges are given but no protocol", "protocols")
    config = SweepConfig(str(raw.get("name", "")), path, tuple(datasets), tuple(captioners),
                         tuple(dict.fromkeys(prompt_ids)), tuple(dict.fromkeys(f for f in frames if f)),
                         tuple(protocols), tuple(judges), options, tuple(captions), prompt_defs)
    pairs = check_config(config, c, check_registry=check_registry, check_paths=check_paths)
    c.raise_problems()
    config = replace(config, pairs=pairs)
    from capeval.engine.prompts_library import register_prompts

    register_prompts(prompt_defs)
    return config


def name_problem(name: str) -> str | None:
    """Why `name` cannot be a sweep's name: it names the default output folder runs/<name>, so it must be one plain
    folder name (no path separators, no '..', not absolute: that would write outside runs/)."""
    if not name.strip():
        return "must not be empty"
    if "/" in name or "\\" in name or name in (".", "..") or name.startswith("~"):
        return f"must be a plain folder name (it names runs/<name>), got {name!r}: no '/', '\\', '..' or '~'"
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        return f"must not contain control characters, got {name!r}"
    return None


def _tracking(c: SweepChecker, raw: Any, base: Path, *, caption_only: bool) -> TrackingSpec | None:
    """`[options] tracking`: "mlflow" | "wandb", or a table {to, and that tracker's settings}; relative paths are
    the sweep file's. Its problems are reported with file, line and field (an extra not installed too)."""
    where = "options.tracking"
    if isinstance(raw, str):
        raw = {"to": raw}
    elif not c.table(raw, SPEC_KEYS, where):
        return None
    values = {k: v for k, v in raw.items() if k in SPEC_KEYS and c.good(raw, k, SPEC_KEYS)}
    if "to" not in values:
        return None
    spec = TrackingSpec(**values)
    problems = spec_problems(spec)
    for name, why in problems:
        c.fail(where if name == "to" else f"{where}.{name}", why, "tracking" if name == "to" else name)
    if caption_only:
        c.fail(where, "a caption-only sweep has no metrics to log (add [[protocols]] and [[judges]])", "tracking")
    return None if problems or caption_only else spec.resolved(base)


def _dataset(c: SweepChecker, d: Any, where: str, base: Path, check_paths: bool) -> DatasetSpec | None:
    if not isinstance(d, dict):
        c.fail(where, f"expected a table, got {type(d).__name__}")
        return None
    ok = True
    for key, (types, required) in _DATASET_COMMON.items():
        if key not in d:
            if required:
                c.fail(where, f"missing required key {key!r}", "datasets")
                ok = False
        elif not type_ok(d[key], types):
            c.fail(f"{where}.{key}", f"expected {'/'.join(t.__name__ for t in as_tuple(types))}, got "
                                     f"{type(d[key]).__name__} ({d[key]!r})", key)
            ok = False
    if type_ok(d.get("limit"), int) and d["limit"] < 1:
        c.fail(f"{where}.limit", f"must be at least 1, got {d['limit']}", "limit")
    params = {k: v for k, v in d.items() if k not in _DATASET_COMMON}
    if not ok:  # dropped; its kind's parameters are still checked, so one run of --check shows every problem
        if isinstance(d.get("kind"), str):
            from capeval.engine.datasets.registry import validate as validate_dataset

            for problem in validate_dataset(d["kind"], params, base, check_paths=check_paths):
                key, _, msg = problem.partition(": ")
                c.fail(f"{where}.{key}", msg, key)
        return None
    return DatasetSpec(d["name"], d["kind"], limit=d.get("limit"), params=params)


def _components(c: SweepChecker, raw: dict, key: str, spec: dict) -> list[ComponentSpec]:
    from capeval.engine.keys import canonical_json

    out, seen = [], {}
    entries = raw.get(key) or []
    if not isinstance(entries, list):
        return out
    c.positions[key] = []
    for i, comp in enumerate(entries):
        where = f"{key}[{i}]"
        if not c.table(comp, spec, where):
            continue
        c.positions[key].append(i)
        seeds = comp.get("seeds", [0])
        if not isinstance(seeds, list):  # reported by the type check above, once
            seeds = [0]
        elif not seeds or not all(type_ok(s, int) for s in seeds):
            c.fail(f"{where}.seeds", f"expected a non-empty list of integers, got {seeds!r}", "seeds")
            seeds = [0]
        params = comp.get("params", {}) if c.good(comp, "params", spec) else {}
        max_tokens = comp.get("max_tokens") if c.good(comp, "max_tokens", spec) else None
        label = comp.get("label") if c.good(comp, "label", spec) else None
        timestamps = comp["timestamps"] if "timestamps" in spec and c.good(comp, "timestamps", spec) else "none"
        if timestamps not in CAPTION_TIMESTAMPS:
            c.fail(f"{where}.timestamps", f"must be one of {', '.join(map(repr, CAPTION_TIMESTAMPS))}, got "
                                          f"{timestamps!r}", "timestamps")
            timestamps = "none"
        x = ComponentSpec(comp["name"], dict(params), tuple(seeds), label, max_tokens, timestamps,
                          _frame_size(c, comp, where) if "frame_size" in spec else None,
                          _dataset_names(c, comp, where) if "datasets" in spec else None,
                          _names(c, comp, where, "judges") if "judges" in spec else None,
                          prices=comp["prices"] if c.good(comp, "prices", spec) else None,
                          validated=str((c.path.parent / Path(comp["validated"]).expanduser()).resolve())
                          if "validated" in spec and c.good(comp, "validated", spec) else None)
        ident = canonical_json([x.name, x.params, list(x.seeds), x.max_tokens, x.timestamps, x.frame_size]
                               + ([sorted(x.judges)] if x.judges is not None else []))  # other judges: other cells
        if ident in seen:  # same content key: it would give the very same results twice
            c.fail(where, f"identical to {key}[{seen[ident]}] (same name, params and seeds)", key)
        seen[ident] = i
        out.append(x)
    labels = [x.display for x in out]
    if len(set(labels)) != len(labels):
        c.fail(key, f"two entries show as the same name ({labels}); give one a distinct `label`", key)
    return out


def _names(c: SweepChecker, comp: dict, where: str, key: str) -> tuple[str, ...] | None:
    """A protocol's `judges` (names or labels, each once); None when it names none (every judge judges it).
    Whether each names a [[judges]] entry is checked with the judges (check_protocol_judges)."""
    names = comp.get(key)
    if not isinstance(names, list):
        return None
    if not all(isinstance(n, str) for n in names):
        c.fail(f"{where}.{key}", f"expected a list of judge names or labels, got {names!r}", key)
        return None
    return tuple(dict.fromkeys(names))


def check_protocol_judges(c: SweepChecker, protocols: list, judges: list) -> None:
    """Each name in a protocol's `judges` names a [[judges]] entry (its label, or the name of one or more); a list
    must name at least one; a judge that no protocol is judged by is a problem (it would run nothing)."""
    have = [j.display for j in judges]
    known = set(have) | {j.name for j in judges}
    for i, p in enumerate(protocols):
        if p.judges is None:
            continue
        where = f"{c.where('protocols', i)}.judges"
        if not p.judges:
            c.fail(where, "must name at least one judge (leave it out: every judge)", "judges")
        for name in p.judges:
            if name not in known:
                c.fail(where, f"no judge named or labelled {name!r} (have {', '.join(map(repr, have)) or 'none'})",
                       "judges")
    for k, j in enumerate(judges):
        if protocols and not any(p.judged_by(j) for p in protocols):
            c.fail(c.where("judges", k), f"no protocol is judged by judge {j.display!r} (every [[protocols]] entry "
                                         f"names its `judges` without it)", "judges")


def _dataset_names(c: SweepChecker, comp: dict, where: str) -> tuple[str, ...] | None:
    """A protocol's `datasets` (names, each once); None when it names none (it judges every dataset it can read).
    Whether each name exists and suits the protocol is checked with the datasets (engine/sweep/pairs.py)."""
    names = comp.get("datasets")
    if not isinstance(names, list):
        return None
    if not all(isinstance(n, str) for n in names):
        c.fail(f"{where}.datasets", f"expected a list of dataset names, got {names!r}", "datasets")
        return None
    return tuple(dict.fromkeys(names))


def _frame_size(c: SweepChecker, comp: dict, where: str) -> str | None:
    """Canonical text of a captioner's `frame_size` (capeval.engine.frames.sizes), or None when it sets none."""
    from capeval.engine.frames.sizes import SizeError, size_text

    if "frame_size" not in comp or not type_ok(comp["frame_size"], (int, str)):
        return None
    try:
        return size_text(comp["frame_size"])
    except SizeError as exc:
        c.fail(f"{where}.frame_size", str(exc), "frame_size")
        return None


def _frame_spec(c: SweepChecker, value: Any, where: str) -> str | None:
    """Canonical text of a frame spec, parsed by the run's own parser (capeval.engine.frames.sampling)."""
    from capeval.engine.frames.sampling import FrameSpec, FrameSpecError

    if isinstance(value, int) and not isinstance(value, bool):
        value = f"uniform:{value}"
    if not isinstance(value, str):
        c.fail(where, f"not a frame spec: {value!r} (use e.g. 'uniform:8', 'linspace:32', 'fps:1' or a positive int)",
               where.split("[")[0].split(".")[-1])
        return None
    try:
        return str(FrameSpec.parse(value))
    except FrameSpecError as exc:
        reason = str(exc).removeprefix(f"frame spec {value!r}: ")
        c.fail(where, f"not a frame spec: {value!r}: {reason}", where.split("[")[0].split(".")[-1])
        return None


def _captions(c: SweepChecker, entries: Any, base: Path, dataset_names: set[str]) -> list[CaptionSource]:
    out = []
    c.positions["captions"] = []
    for i, e in enumerate(entries if isinstance(entries, list) else []):
        where = f"captions[{i}]"
        if not c.table(e, _CAPTIONS, where):
            continue
        c.positions["captions"].append(i)
        p = Path(e["path"]).expanduser()
        p = p if p.is_absolute() else base / p
        if e.get("dataset") is not None and e["dataset"] not in dataset_names:
            c.fail(f"{where}.dataset", f"no dataset named {e['dataset']!r} (have {sorted(dataset_names)})", "dataset")
        if problem := format_problem(e.get("format"), e.get("id_field")):
            c.fail(f"{where}.{problem[0]}", problem[1], problem[0])
        out.append(CaptionSource(str(p), e.get("dataset"), e.get("captioner"), e.get("prompt_id", "file"),
                                 e.get("frame_spec", "file"),
                                 None if e.get("format") == "capeval" else e.get("format"), e.get("id_field")))
    return out
