"""Content keys: every stage output is keyed by a hash of everything that determines it.

A key is the hex SHA-256 of a canonical JSON encoding (sorted keys, no whitespace, UTF-8), so the same
inputs, config and model give the same key on any machine and in any run order.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Iterable


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_default)


def _default(value: Any) -> Any:
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if hasattr(value, "__dict__"):
        return vars(value)
    raise TypeError(f"cannot make a content key from {type(value).__name__}")


def content_key(*parts: Any, length: int = 32) -> str:
    """Hex key of `parts`; `length` hex chars (128 bits by default) keep Parquet key columns small."""
    digest = hashlib.sha256(canonical_json(list(parts)).encode("utf-8")).hexdigest()
    return digest[:length]


def file_digest(path: str | Path, chunk: int = 1 << 20) -> str:
    """SHA-256 of a file's bytes (videos are keyed by content, not by path)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()[:32]


def derived_seed(*parts: Any) -> int:
    """A stable 63-bit seed from content (e.g. an item id), independent of run order."""
    return int(hashlib.sha256(canonical_json(list(parts)).encode("utf-8")).hexdigest()[:15], 16)


# -- Revisions ---------------------------------------------------------------------------------------------------
# A revision is a component's own revision followed by tags, '|'-joined: the judge's revision, then what else decides
# its answers (the protocol and its version, the prompt pack's digest, the mode). It enters keys as text, so each tag
# keeps its text form exactly (existing caches must still hit); a kind of tag is one function here.


def tagged_revision(base: str, *tags: str) -> str:
    """`base`, then each tag, '|'-joined."""
    return "|".join((base, *tags))


def protocol_tag(name: str, version: str) -> str:
    return f"{name}@{version}"


def pack_tag(digest: str) -> str:
    return f"pack:{digest}"


def packs_tag(digests: Iterable[str | None]) -> str:
    """Several packs in one tag, in order; `-` for a pack not used."""
    return "packs:" + ",".join(d if d is not None else "-" for d in digests)


def mode_tag(mode: str) -> str:
    return f"mode:{mode}"


def construct_tag(pipeline: str, step: str, version: str) -> str:
    return f"construct:{pipeline}/{step}@{version}"


def caption_group_tags(captioner: str, prompt_id: str, frame_spec: str) -> tuple[str, str, str]:
    """A (captioner, prompt, frames) group as plain tags: rows made for the group itself, not for one caption."""
    return captioner, prompt_id, frame_spec


# -- Keys of stage outputs ---------------------------------------------------------------------------------------


def frames_key(source: str, frame_spec: str, frame_size: str) -> str:
    """Key of one video's sampled frames: `source` is the video's file digest (or `path:ABSOLUTE` when it cannot be
    read), `frame_spec` the spec's canonical text, `frame_size` the size's text (capeval.engine.frames.decode)."""
    return content_key("frames", source, frame_spec, frame_size)


def caption_key(frames_key: str, captioner: str, revision: str, prompt_text: str, params: dict) -> str:
    """Key of one caption: the frames, the captioner's identity and weights, the exact prompt and the params."""
    return content_key("caption", frames_key, captioner, revision, prompt_text, params)


def caption_file_key(captioner: str, prompt_id: str, frame_spec: str, video_id: str, text: str) -> str:
    """Key of a caption read from a captions file: its identity columns and text."""
    return content_key("caption-file", captioner, prompt_id, frame_spec, video_id, text)


def repeated_caption_file_key(key: str, repeat: int) -> str:
    """Key of the `repeat`-th (1, 2, ...) further caption with the same caption_file_key (every line kept)."""
    return content_key("caption-file-repeat", key, repeat)


def request_key(judge: str, revision: str, *, system: str | None, user: str, images_digest: str | None,
                choices: Iterable[str] | None, json_schema: str | None, max_tokens: int | None,
                temperature: float | None, seed: int, send_seed: bool = True) -> str:
    """The judge cache key: everything that determines the judge's answer, nothing about which item asked.
    max_tokens None / send_seed False: none sent (official scripts that set no sampling); the seed then still tells
    repeated judge trials apart."""
    sampling = {"choices": list(choices) if choices else None, "json_schema": json_schema,
                "max_tokens": None if max_tokens is None else int(max_tokens),
                "temperature": None if temperature is None else float(temperature)}
    if not send_seed:  # only then: the keys of seeded requests (and their caches) stay as they were
        sampling["seed_sent"] = False
    return content_key("judgment", judge, revision, system, user, images_digest, sampling, int(seed))


def reask_key(request_key: str, attempt: int, temperature: float | None = None) -> str:
    """Key of a re-ask at a temperature; `temperature` None: the default re-ask temperature (not in the key, so
    the keys of existing caches stay)."""
    if temperature is None:
        return content_key("reask", request_key, int(attempt))
    return content_key("reask", request_key, int(attempt), float(temperature))


def resend_key(request_key: str, attempt: int) -> str:
    """Key of the `attempt`-th resend of a request unchanged (another sample of the same request)."""
    return content_key("resend", request_key, int(attempt))


def json_schema_key(text: str) -> str:
    """Short identity of a JSON schema's text (transcripts name the schema instead of repeating it)."""
    return content_key("json_schema", text)


def dataset_table_key(items, media_digests: Any, batch_rows: int = 4096) -> str:
    """Key of a dataset's content: its item rows (an Arrow table, without media paths) and the digests of its media
    files; content_key("dataset", rows, media_digests), hashed batch by batch (a JSON array is its items' texts
    joined by ","), so every row is never held as a dict at once."""
    h = hashlib.sha256(b'["dataset",[')
    sep = b""
    for batch in items.to_batches(batch_rows):
        if batch.num_rows:
            h.update(sep + canonical_json(batch.to_pylist())[1:-1].encode("utf-8"))
            sep = b","
    h.update(b"]," + canonical_json(media_digests).encode("utf-8") + b"]")
    return h.hexdigest()[:32]


def cell_key(parts: list, extra: dict) -> str:
    """Key of a sweep cell's result from its identity `parts`; `extra` holds settings that enter only when set
    (empty: not in the key at all, so the keys of sweeps made before those settings existed stay)."""
    return content_key(*parts, extra) if extra else content_key(*parts)

