"""Prompt packs: a protocol's prompts as data, in the layout of the official packs (`[[prompt]]` tables with `id`,
`role_system`, `user` as a `str.format` template, `placeholders`, `output`, `sampling`).

capeval ships its own pack per protocol (`engine/protocols/<name>/pack.toml`, capeval's wording). Another pack, such
as a benchmark's official prompts, is read from a path the user gives (`--prompts FILE`, a sweep's
`protocols[].params.prompts`), exactly as annotations are read from a release folder: the official texts are never
part of this project. A pack's content hash enters every request key and the run's provenance, so two packs never
share cached judgments.
"""

from __future__ import annotations

import hashlib
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Environment variable naming a folder of packs (`<protocol>.toml`, e.g. ../shared/protocols) that official mode
#: reads when no explicit pack is given.
PACKS_ENV = "CAPEVAL_PACKS"
MODES = ("official", "strict")


def check_mode(protocol: str, mode: str | None) -> str:
    """The run's mode ("strict" when not given); anything else than official/strict is an error naming the protocol."""
    mode = mode or "strict"
    if mode not in MODES:
        raise ValueError(f"{protocol}: param mode must be 'official' or 'strict', got {mode!r}")
    return mode


class PackError(ValueError):
    """A pack that cannot be read or rendered; the message names the file, prompt id and field."""


@dataclass(frozen=True)
class PackPrompt:
    id: str
    user: str
    role_system: str | None = None
    placeholders: dict[str, Any] = field(default_factory=dict)
    output: Any = None
    sampling: Any = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    def render(self, **fields: Any) -> tuple[str | None, str]:
        """(system, user) with `user.format(**fields)`; a missing placeholder is an error naming it."""
        try:
            return self.role_system, self.user.format(**fields)
        except KeyError as exc:
            raise PackError(f"prompt {self.id!r}: no value for placeholder {exc.args[0]!r} "
                            f"(given: {sorted(fields)})") from None
        except (IndexError, ValueError) as exc:
            raise PackError(f"prompt {self.id!r}: template cannot be rendered: {exc}") from None


@dataclass(frozen=True)
class PromptPack:
    path: Path
    digest: str  # SHA-256 of the file's bytes (first 32 hex chars): enters request keys and provenance
    meta: dict[str, Any]
    prompts: dict[str, PackPrompt]
    data: dict[str, Any] = field(repr=False, default_factory=dict)  # the whole parsed TOML ([[category]], ...)

    @property
    def name(self) -> str:
        return str(self.meta.get("benchmark") or self.path.stem)

    def prompt(self, prompt_id: str) -> PackPrompt:
        try:
            return self.prompts[prompt_id]
        except KeyError:
            raise PackError(f"{self.path}: no prompt with id {prompt_id!r}; it has {sorted(self.prompts)}") from None

    def has(self, prompt_id: str) -> bool:
        return prompt_id in self.prompts

    def render(self, prompt_id: str, **fields: Any) -> tuple[str | None, str]:
        return self.prompt(prompt_id).render(**fields)

    def table(self, name: str) -> list[dict[str, Any]]:
        """An array of tables other than prompts, e.g. `category` or `question_type` ([] when absent)."""
        value = self.data.get(name, [])
        return value if isinstance(value, list) else []

    def provenance(self) -> dict[str, str]:
        return {"pack": str(self.path), "pack_digest": self.digest, "pack_name": self.name}


#: Packs read, by the file as named (its name, and the working folder for a relative name) and the file's identity
#: and version (device, inode, size, mtime): a hit costs one stat, so a protocol may load its pack per request.
_CACHE: dict[tuple, PromptPack] = {}


def load_pack(path: str | os.PathLike) -> PromptPack:
    """Read and check a pack file (cached while the file named is unchanged; the pack's `path` is resolved)."""
    name = os.fspath(path)
    try:
        st = os.stat(os.path.expanduser(name))
    except (FileNotFoundError, NotADirectoryError):
        raise PackError(f"prompt pack not found: {path}") from None
    ck = ("" if os.path.isabs(name) else os.getcwd(), name, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    pack = _CACHE.get(ck)
    if pack is not None:
        return pack
    p = Path(name).expanduser().resolve()
    raw = p.read_bytes()
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise PackError(f"{p}: not a valid TOML prompt pack: {exc}") from None
    prompts: dict[str, PackPrompt] = {}
    for i, entry in enumerate(data.get("prompt", []), start=1):
        where = f"{p}: [[prompt]] #{i}"
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
            raise PackError(f"{where}: field 'id' (text) is required")
        if not isinstance(entry.get("user"), str):
            raise PackError(f"{where} (id {entry['id']!r}): field 'user' (text) is required")
        if entry["id"] in prompts:
            raise PackError(f"{where}: duplicate id {entry['id']!r}")
        system = entry.get("role_system")
        if system is not None and not isinstance(system, str):
            raise PackError(f"{where} (id {entry['id']!r}): field 'role_system' must be text")
        prompts[entry["id"]] = PackPrompt(entry["id"], entry["user"], system, dict(entry.get("placeholders") or {}),
                                          entry.get("output"), entry.get("sampling"), entry)
    if not prompts:
        raise PackError(f"{p}: a prompt pack needs at least one [[prompt]] table")
    pack = PromptPack(p, hashlib.sha256(raw).hexdigest()[:32], dict(data.get("meta") or {}), prompts, data)
    if len(_CACHE) >= 256:  # a long-lived process that reads many pack versions keeps the latest ones
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[ck] = pack
    return pack


_HERE = Path(__file__).resolve().parent


def builtin_pack_path(protocol: str) -> Path:
    """capeval's own pack for `protocol` (its wording, shipped with the engine)."""
    return _HERE / "protocols" / protocol / "pack.toml"


def resolve_pack(protocol: str, prompts: str | os.PathLike | None = None, *, mode: str = "strict",
                 official_name: str | None = None) -> PromptPack:
    """The pack a run uses: the explicit `prompts` path; else, in official mode, `<official_name>.toml` from the
    folder named by $CAPEVAL_PACKS; else capeval's own pack. Official mode without an official pack is an error:
    the official texts are not shipped with capeval."""
    if mode not in MODES:
        raise PackError(f"mode must be one of {MODES}, got {mode!r}")
    if prompts:
        return load_pack(prompts)
    if mode == "official":
        name = official_name or protocol
        folder = os.environ.get(PACKS_ENV)
        if folder and (Path(folder) / f"{name}.toml").is_file():
            return load_pack(Path(folder) / f"{name}.toml")
        raise PackError(f"{protocol}: official mode needs the benchmark's official prompt pack: pass --prompts "
                        f"PATH/{name}.toml (params.prompts in a sweep) or set {PACKS_ENV} to the folder holding it "
                        f"(e.g. ../shared/protocols)")
    return load_pack(builtin_pack_path(protocol))
