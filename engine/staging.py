"""What `capeval submit` ships with a sweep: only the files the sweep declares and the media its datasets read.

`plan_staging(sweep)` decides everything before a byte is copied; `write_staging(plan, folder)` copies it.

- Declared path fields only: each dataset kind's path parameters (registry `Param.path`), the files its loader
  reads (an items table; from a folder, what the kind's `files_in_folder` names: a release's task files or
  score file), `[[captions]].path`, prompt `file`/`pack`, the protocol params that name prompt packs
  (`JudgeProtocol.pack_params`), `[options] prices` (a prices file), and `replies` of a replay judge or captioner.
  Any other string (a label, a name) is never read as a path and never rewritten.
- Media: exactly the files the dataset kind's own loader lists (`DatasetLoad.media`), never a folder wholesale.
- Roots: every shipped file must lie (after symlinks are resolved) under an allowed root: the sweep file's folder,
  each dataset's folders (the folder of its path, its `media_root`, those its kind's `extra_roots` adds:
  a release root above the annotations) and any
  `--allow-root`; below its root no path component may be hidden (`.ssh`, `.aws`), and media must have a video or
  image suffix. Anything else is refused (exit 2) naming the field, or the table's row, and the resolved path.
- Size: the total is computed from the plan and refused above the cap before anything is copied.
- Credentials: a credential value anywhere in the sweep (capeval.engine.secrets.is_secret_name), or a URL holding one
  (userinfo, a `?api-key=` / `token=` parameter: capeval.engine.secrets.redact_url), is refused; the user names an
  environment variable instead (`api_key_env`), resolved where the judge runs.
- Layout: files keep their place relative to their root (`data/<n>_<root name>/...`), so relative references
  between them still hold; an items table whose media would no longer resolve gets a rewritten copy (JSONL) whose
  rows name the staged media (and keep their video ids). The list of shipped files is written beside the staged
  sweep (`SHIPPED_LIST`).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capeval.engine.datasets.media import media_suffixes
from capeval.engine.datasets.registry import load
from capeval.engine.errors import UsageError
from capeval.engine.registry import lookup
from capeval.engine.secrets import is_secret_name, redact_urls
from capeval.engine.staging_items import media_rows, rewritten_table
from capeval.engine.sweep.lines import LineFinder
from capeval.engine.sweep.validation import protocol_pack_params

MAX_SHIPPED_BYTES = 400 * 1024 * 1024  # Ray refuses working_dirs above ~500 MiB; refuse clearly before
SHIPPED_LIST = "SHIPPED.txt"
#: judge/captioner params that name a file (replay's recorded replies)
COMPONENT_FILE_PARAMS = ("replies",)
PROMPT_FILE_KEYS = ("file", "pack")


class StagingError(UsageError):
    """The sweep cannot be shipped as it is; the message lists every problem (exit 2)."""


@dataclass(frozen=True)
class Shipped:
    source: Path  # resolved
    staged: str  # relative to the staging folder
    size: int
    why: str  # the sweep field (or table row) that asked for it


@dataclass
class StagePlan:
    sweep: Path
    raw: dict  # the sweep as staged: declared path fields point at the staged copies
    files: list[Shipped] = field(default_factory=list)
    rewritten: dict[str, bytes] = field(default_factory=dict)  # staged path -> content (items tables)
    folders: list[str] = field(default_factory=list)  # staged folders a declared `dir` param needs to exist
    roots: list[Path] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files) + sum(len(b) for b in self.rewritten.values())

    def listing(self) -> list[str]:
        return [f"{f.staged}\t{f.size}\t{f.source}\t{f.why}" for f in self.files] + [
            f"{rel}\t{len(data)}\t(rewritten: media paths point at the staged media)\t" for rel, data in
            self.rewritten.items()]


def credential_problems(raw: Any, sweep: Path, text: str) -> list[str]:
    """Every credential value in the sweep, as 'file, line N: field: message'."""
    lines, out = LineFinder(text), []

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                here = f"{where}.{k}" if where else str(k)
                if is_secret_name(k) and isinstance(v, str) and v:
                    line = lines.line_of(where, str(k)) if where else None
                    out.append(f"{sweep}{f', line {line}' if line else ''}: {here}: a credential value; capeval "
                               f"submit never ships credentials. Name an environment variable instead "
                               f"({k}_env = \"OPENAI_API_KEY\"), set on the cluster, or pass --forward-env NAME "
                               f"to send this machine's value with the job")
                elif isinstance(v, str) and redact_urls(v) != v:
                    url_problem(v, here, lines.line_of(where, str(k)) if where else None)
                else:
                    walk(v, here)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                if isinstance(v, str) and redact_urls(v) != v:
                    url_problem(v, f"{where}[{i}]", None)
                else:
                    walk(v, f"{where}[{i}]")

    def url_problem(value: str, here: str, line: int | None) -> None:
        out.append(f"{sweep}{f', line {line}' if line else ''}: {here}: a URL holding a credential "
                   f"({redact_urls(value)}); capeval submit never ships credentials. Take the key out of the URL "
                   f"and name an environment variable instead (api_key_env = \"OPENAI_API_KEY\"), set on the "
                   f"cluster, or pass --forward-env NAME")

    walk(raw, "")
    return out


class _Planner:
    def __init__(self, sweep: Path, allow_roots: list[Path], ship_data: bool):
        self.sweep, self.base, self.ship_data = sweep, sweep.parent, ship_data
        self.allowed = [sweep.parent] + [Path(r).expanduser().resolve() for r in allow_roots]
        self.problems: list[str] = []
        self.files: dict[Path, Shipped] = {}
        self.rewritten: dict[str, bytes] = {}
        self.folders: list[str] = []
        self.roots: list[Path] = []
        self.original_datasets: list[dict] = []

    # ---- roots and places ----
    def absolute(self, value: str, base: Path | None = None) -> Path:
        p = Path(value).expanduser()
        return p if p.is_absolute() else (base or self.base) / p

    def collapse_roots(self) -> None:
        """Keep only outermost roots, so each file has exactly one, and files under one root keep their layout."""
        kept: list[Path] = []
        for r in sorted({r.resolve() for r in self.allowed}, key=lambda p: (len(p.parts), str(p))):
            if not any(r.is_relative_to(k) for k in kept):
                kept.append(r)
        self.roots = kept

    def place(self, path: Path, why: str, *, media: bool = False) -> str | None:
        """Staged relative path of `path` (resolved), or None after recording why it may not be shipped."""
        real = path.resolve()
        root = next((r for r in self.roots if real.is_relative_to(r)), None)
        if root is None:
            self.problems.append(f"{why}: {path} resolves to {real}, outside the folders capeval submit may ship "
                                 f"from ({', '.join(map(str, self.roots))}); add its folder with --allow-root DIR")
            return None
        rel = real.relative_to(root)
        if any(part.startswith(".") for part in rel.parts):
            self.problems.append(f"{why}: {real} is hidden (a name below {root} starts with '.'); capeval submit "
                                 f"ships no hidden files; pass --allow-root with the folder holding it")
            return None
        if media and real.suffix.lower() not in media_suffixes():
            self.problems.append(f"{why}: {real} is not a video or image file (suffix {real.suffix or 'none'!r}); "
                                 f"media must be one of {', '.join(media_suffixes())}")
            return None
        return (Path("data") / f"{self.roots.index(root):02d}_{root.name or 'root'}" / rel).as_posix()

    def ship(self, path: Path, why: str, *, media: bool = False) -> str | None:
        staged = self.place(path, why, media=media)
        if staged is None:
            return None
        real = path.resolve()
        if not real.is_file():
            self.problems.append(f"{why}: file not found here: {path}")
            return None
        self.files.setdefault(real, Shipped(real, staged, real.stat().st_size, why))
        return staged

    # ---- the sweep's declared fields ----
    def dataset_roots(self, raw: dict) -> None:
        for d in _entries(raw, "datasets"):
            try:
                kind = lookup("dataset_kind", d.get("kind"))
            except (KeyError, TypeError):
                continue  # load_sweep has reported it already
            for p in kind.params:
                if p.path and isinstance(d.get(p.name), str):
                    target = self.absolute(d[p.name])
                    if p.path == "glob" and _is_glob(str(target)):
                        target = _glob_root(target)
                    self.allowed.append(target if target.is_dir() else target.parent)
                    if kind.extra_roots and p.name == "path":
                        self.allowed.extend(kind.extra_roots(target, d))

    def staged_value(self, value: str, why: str, base: Path | None = None) -> str | None:
        """A declared file field: shipped (its staged path) or, without shipping, made absolute."""
        path = self.absolute(value, base)
        return self.ship(path, why) if self.ship_data else str(path.resolve())

    def datasets(self, raw: dict) -> None:
        for i, d in enumerate(_entries(raw, "datasets")):
            try:
                kind = lookup("dataset_kind", d.get("kind"))
            except (KeyError, TypeError):
                continue
            for p in kind.params:
                value = d.get(p.name)
                if not p.path or not isinstance(value, str):
                    continue
                why = f"datasets[{i}].{p.name}"
                target = self.absolute(value)
                if not self.ship_data:
                    d[p.name] = str(target.resolve()) if not _is_glob(str(target)) else str(target)
                elif p.path == "glob" and _is_glob(str(target)):
                    root = _glob_root(target)
                    staged = self.place(root, why)
                    if staged is not None:
                        d[p.name] = f"{staged}/{target.relative_to(root).as_posix()}"
                elif target.is_dir():
                    staged = self.place(target, why)
                    if staged is not None:
                        d[p.name] = staged
                        self.folders.append(staged)
                        for f in (kind.files_in_folder(target, d) if kind.files_in_folder else []):
                            self.ship(f, why)
                else:
                    staged = self.ship(target, why)
                    if staged is not None:
                        d[p.name] = staged
            if self.ship_data and kind.reads_only:  # not e.g. synthetic: its videos are generated where it runs
                self.media(i, d, kind.name)

    def media(self, i: int, d: dict, kind: str) -> None:
        """Ship the media the kind's own loader lists; an items table whose rows would no longer find them is
        rewritten."""
        original = self.original_datasets[i]  # the user's paths, not the staged ones
        params = {k: v for k, v in original.items() if k not in ("name", "kind", "limit")}
        try:
            loaded = load(kind, params, base_dir=self.base, out_dir=self.base / ".capeval-check-unused",
                          name=str(d.get("name")))
        except (ValueError, OSError, KeyError) as exc:
            self.problems.append(f"datasets[{i}]: {exc}")
            return
        rows = media_rows(self.absolute(original["path"])) if kind == "items" else {}
        staged_media = {}
        for vid, path in loaded.media.items():
            real = Path(path).resolve()
            line, written = rows.get(real, (None, None))
            why = (f"datasets[{i}] ({self.absolute(original['path'])}, line {line}): media_path {written!r}"
                   if line else f"datasets[{i}]: media of video {vid!r}")
            staged = self.ship(Path(path), why, media=True)
            if staged is not None:
                staged_media[real] = staged
        if kind == "items" and d.get("path") in {f.staged for f in self.files.values()}:
            self.rewrite_items(d, self.absolute(original["path"]), staged_media)

    def rewrite_items(self, d: dict, table: Path, staged_media: dict[Path, str]) -> None:
        new = rewritten_table(table, d["path"], staged_media)
        if new is not None:
            self.files.pop(table.resolve(), None)
            self.rewritten[new[0]] = new[1]
            d["path"] = new[0]

    def declared_files(self, raw: dict) -> None:
        for i, e in enumerate(_entries(raw, "captions")):
            if isinstance(e.get("path"), str):
                e["path"] = self.staged_value(e["path"], f"captions[{i}].path") or e["path"]
        for i, e in enumerate(_entries(raw, "prompts")):
            for key in PROMPT_FILE_KEYS:
                if isinstance(e.get(key), str):
                    e[key] = self.staged_value(e[key], f"prompts[{i}].{key}") or e[key]
        for i, e in enumerate(_entries(raw, "protocols")):
            params = e.get("params") if isinstance(e.get("params"), dict) else {}
            for key in protocol_pack_params(e.get("name")):
                if isinstance(params.get(key), str):
                    params[key] = self.staged_value(params[key], f"protocols[{i}].params.{key}") or params[key]
        for i, e in enumerate(_entries(raw, "judges")):  # a judge's validation file (capeval judge validate --out)
            if isinstance(e.get("validated"), str):
                e["validated"] = self.staged_value(e["validated"], f"judges[{i}].validated") or e["validated"]
        options = raw.get("options")
        if isinstance(options, dict) and isinstance(options.get("prices"), str):  # a prices file (sweep/prices.py)
            options["prices"] = self.staged_value(options["prices"], "options.prices") or options["prices"]
        for section in ("judges", "captioners"):
            for i, e in enumerate(_entries(raw, section)):
                params = e.get("params") if isinstance(e.get("params"), dict) else {}
                for key in COMPONENT_FILE_PARAMS:
                    if isinstance(params.get(key), str):  # read as the run reads it: relative to the current folder
                        params[key] = self.staged_value(params[key], f"{section}[{i}].params.{key}",
                                                        base=Path.cwd()) or params[key]


def _entries(raw: dict, key: str) -> list[dict]:
    value = raw.get(key)
    return [e for e in value if isinstance(e, dict)] if isinstance(value, list) else []


def _is_glob(text: str) -> bool:
    return any(ch in text for ch in "*?[")


def _glob_root(pattern: Path) -> Path:
    """The folder before a glob's first wildcard (as the videos kind computes it)."""
    parts = []
    for part in pattern.parts:
        if _is_glob(part):
            break
        parts.append(part)
    return Path(*parts)


def read_raw(path: Path) -> tuple[dict, str]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".toml":
        import tomllib

        return tomllib.loads(text), text
    import yaml

    return yaml.safe_load(text), text


def plan_staging(sweep: str | Path, *, allow_roots: list | tuple = (), ship_data: bool = True,
                 max_bytes: int = MAX_SHIPPED_BYTES) -> StagePlan:
    """Everything `write_staging` will copy, checked (roots, hidden files, media suffixes, credentials, size);
    StagingError lists every problem. Nothing is copied here."""
    import copy

    sweep = Path(sweep).resolve()
    raw, text = read_raw(sweep)
    problems = credential_problems(raw, sweep, text)
    staged = copy.deepcopy(raw)
    planner = _Planner(sweep, list(allow_roots), ship_data)
    planner.original_datasets = copy.deepcopy(_entries(raw, "datasets"))
    planner.dataset_roots(staged)
    planner.collapse_roots()
    planner.datasets(staged)
    planner.declared_files(staged)
    problems += planner.problems
    if problems:
        head = problems[0] if len(problems) == 1 else f"{len(problems)} problems:\n  " + "\n  ".join(problems)
        raise StagingError(f"{sweep}: cannot ship this sweep: {head}")
    plan = StagePlan(sweep, staged, sorted(planner.files.values(), key=lambda f: f.staged), planner.rewritten,
                     sorted(set(planner.folders)), planner.roots)
    if plan.total_bytes > max_bytes:
        biggest = sorted(plan.files, key=lambda f: -f.size)[:3]
        raise StagingError(f"{sweep}: the files it ships hold {plan.total_bytes / 2**20:.1f} MiB, over the "
                           f"{max_bytes / 2**20:.0f} MiB cap (largest: "
                           + ", ".join(f"{f.source} {f.size / 2**20:.1f} MiB" for f in biggest)
                           + "); nothing was copied. Put the data on storage the cluster sees and pass --no-ship-data")
    return plan


def write_staging(plan: StagePlan, staging: Path) -> Path:
    """Copy the plan into `staging`; returns the staged sweep file. The list of shipped files goes beside it."""
    import yaml

    staging.mkdir(parents=True, exist_ok=True)
    for rel in plan.folders:
        (staging / rel).mkdir(parents=True, exist_ok=True)
    for f in plan.files:
        dest = staging / f.staged
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f.source, dest)  # content only: the resolved file, never a link
    for rel, data in plan.rewritten.items():
        (staging / rel).parent.mkdir(parents=True, exist_ok=True)
        (staging / rel).write_bytes(data)
    out = staging / (plan.sweep.stem + ".yaml")
    out.write_text(f"# staged by capeval submit from {plan.sweep}\n" + yaml.safe_dump(plan.raw, sort_keys=False))
    (staging / SHIPPED_LIST).write_text("# staged path\tbytes\tsource\tasked for by\n"
                                        + "".join(line + "\n" for line in plan.listing()))
    return out


def stage_sweep(sweep: str | Path, staging: Path, ship_data: bool = True, *, allow_roots: list | tuple = (),
                max_bytes: int = MAX_SHIPPED_BYTES) -> tuple[Path, list[tuple[str, str]]]:
    """plan_staging + write_staging; returns (staged sweep file, [(source, staged path)])."""
    plan = plan_staging(sweep, allow_roots=allow_roots, ship_data=ship_data, max_bytes=max_bytes)
    out = write_staging(plan, staging)
    return out, [(str(f.source), f.staged) for f in plan.files] + [("(rewritten)", rel) for rel in plan.rewritten]
