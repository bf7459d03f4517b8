"""Dataset kinds: how a sweep's `[[datasets]]` table (or `capeval judge --dataset KIND`) becomes ITEMS + media.

Each kind is one module defining a `DatasetKind` with its parameters, registered as a `capeval.dataset_kinds`
entry point (capeval.engine.registry; `lookup("dataset_kind", name)`): the generic kinds live under
engine/datasets/kinds/; a protocol that brings its own release layout defines its kind in its own package
(engine/protocols/<name>/dataset_kind.py), so this package never imports a protocol by name (docs/architecture.md).
`validate(params, base_dir)` checks them without loading anything heavy (types, required keys, paths that must
exist) and returns every problem as "key: message"; `load(params, base_dir=, out_dir=)` returns the items and
{video_id: media path}. Relative paths resolve against `base_dir` (the sweep file's folder); relative media paths
inside a dataset file resolve against that file (or the kind's `media_root`).
"""

from __future__ import annotations

import glob as globmod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa

from capeval.engine.errors import UsageError
from capeval.engine.registry import lookup


@dataclass(frozen=True)
class Param:
    name: str
    types: tuple[type, ...]
    doc: str
    required: bool = False
    path: str | None = None  # "file" | "dir" | "file_or_dir" | "glob": checked to exist by validate
    check: Callable[[Any], str | None] | None = None  # extra value check; returns an error text or None


@dataclass
class DatasetLoad:
    items: pa.Table  # capeval.engine.schemas.ITEMS
    media: dict[str, str] = field(default_factory=dict)  # video_id -> path of the video or image
    captions: pa.Table | None = None  # CAPTIONS that come with the dataset (VATEX-EVAL's rated candidates)


@dataclass(frozen=True)
class DatasetKind:
    name: str
    doc: str
    params: tuple[Param, ...]
    loader: Callable[..., DatasetLoad]
    # True when every item needs a media file to caption; False for kinds whose items may come with captions only
    needs_media: bool = True
    extra_check: Callable[[dict, Path], list[str]] | None = None
    # True when the loader only reads files (tables, annotations, a folder listing): `--check` loads it before any
    # work (a table the run would refuse is reported with the sweep file's line) and `capeval submit` ships the
    # media it lists. False (synthetic: it generates its videos where it runs) skips both.
    reads_only: bool = False
    # Staging hooks (engine/staging.py), for kinds whose loader reads more than its path params name:
    # extra_roots(path, params): folders besides its path params' own that shipped files may lie under, given the
    # resolved `path` param and the params as written (e.g. the release root above annotations/);
    # files_in_folder(folder, params): the data files its loader reads from a folder given as `path` (media are
    # listed by the loader itself).
    extra_roots: Callable[[Path, dict], list[Path]] | None = None
    files_in_folder: Callable[[Path, dict], list[Path]] | None = None
    # Human ratings the release carries, for `capeval align --dataset KIND --data DIR`: ratings(folder) -> a Polars
    # frame of video_id, candidate_index and one rating_<k> column per annotator (None: the kind has none).
    ratings: Callable[[Path], Any] | None = None

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)

    def validate(self, params: dict, base_dir: str | Path = ".", *, check_paths: bool = True) -> list[str]:
        """Every problem with `params` as "key: message" (empty when they are fine); `check_paths=False` skips the
        checks that files exist (for checking a sweep file written for another machine)."""
        base = Path(base_dir)
        errors = []
        allowed = {p.name for p in self.params}
        for key in params:
            if key not in allowed:
                errors.append(f"{key}: unknown key {key!r} for dataset kind {self.name!r} "
                              f"(allowed: {', '.join(sorted(allowed | {'name', 'kind', 'limit'}))})")
        for p in self.params:
            if p.name not in params:
                if p.required:
                    errors.append(f"{p.name}: required for dataset kind {self.name!r} ({p.doc})")
                continue
            v = params[p.name]
            if not isinstance(v, p.types) or (isinstance(v, bool) and bool not in p.types):
                wanted = "/".join(t.__name__ for t in p.types)
                errors.append(f"{p.name}: expected {wanted}, got {type(v).__name__} ({v!r})")
                continue
            if p.check and (msg := p.check(v)):
                errors.append(f"{p.name}: {msg}")
            if p.path and check_paths and (msg := _path_problem(resolve(base, v), p.path)):
                errors.append(f"{p.name}: {msg}")
        if not errors and check_paths and self.extra_check:
            errors.extend(self.extra_check(params, base))
        return errors

    def load(self, params: dict, *, base_dir: str | Path = ".", out_dir: str | Path = ".capeval",
             name: str = "data") -> DatasetLoad:
        errors = self.validate(params, base_dir)
        if errors:
            raise UsageError(f"dataset {name!r} (kind {self.name!r}): " + "; ".join(errors))
        return self.loader(params, base_dir=Path(base_dir), out_dir=Path(out_dir), name=name)


def resolve(base: Path, value: str) -> Path:
    p = Path(value).expanduser()
    return p if p.is_absolute() else base / p


def _path_problem(path: Path, kind: str) -> str | None:
    if kind == "glob" and any(ch in str(path) for ch in "*?["):
        return None if globmod.glob(str(path), recursive=True) else f"no file matches {path}"
    if kind == "file" and not path.is_file():
        return f"file not found: {path}"
    if kind == "dir" and not path.is_dir():
        return f"folder not found: {path}"
    if kind in ("file_or_dir", "glob") and not path.exists():
        return f"not found: {path}"
    return None


def validate(kind: str, params: dict, base_dir: str | Path = ".", *, check_paths: bool = True) -> list[str]:
    try:
        return lookup("dataset_kind", kind).validate(params, base_dir, check_paths=check_paths)
    except KeyError as exc:
        return [f"kind: {exc.args[0]}"]


def load(kind: str, params: dict, *, base_dir: str | Path = ".", out_dir: str | Path = ".capeval",
         name: str = "data") -> DatasetLoad:
    return lookup("dataset_kind", kind).load(params, base_dir=base_dir, out_dir=out_dir, name=name)


def positive_int(v: Any) -> str | None:
    return None if v >= 1 else f"must be at least 1, got {v}"


def positive_number(v: Any) -> str | None:
    return None if v > 0 else f"must be a positive number, got {v}"
