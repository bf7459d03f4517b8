"""How a caption names its video, the same for every dataset kind (docs/inputs.md "Video ids").

Each kind gives every video a `video_id` (the `videos` kind: the path under its folder without the suffix, `v01`;
an `items` table: its `video_id` column, else `media_path` as written, `clips/v01.mp4`; the benchmark kinds: the
release's ids). A caption names a video by its item_id or video_id; failing both, by its media file: the file's
path or any trailing part of it, with or without the suffix (`v01`, `v01.mp4`, `clips/v01`, `clips/v01.mp4`, the
absolute path), as long as that names exactly one video of the dataset. So one captions file serves an `items`
table and a `videos` folder of the same clips. Ids are never rewritten in the datasets themselves, so no run key
changes: only captions that matched nothing before now find their video.
"""

from __future__ import annotations

from pathlib import PurePosixPath

import pyarrow as pa
import pyarrow.compute as pc

from capeval.engine.errors import UsageError


def _forms(path: str) -> set[str]:
    """Every trailing part of `path` ('/'-separated), each with and without the last suffix."""
    text = path.replace("\\", "/")
    while text.startswith("./"):
        text = text[2:]
    parts = [p for p in text.split("/") if p not in ("", ".")]
    out = {text}
    for k in range(1, len(parts) + 1):
        tail = "/".join(parts[-k:])
        out.add(tail)
        stem = PurePosixPath(tail)
        if stem.suffix:
            out.add(str(stem.with_suffix("")))
    return out


def video_aliases(items: pa.Table) -> dict[str, str]:
    """{name: video_id} for every name that names exactly one video of `items` by its media file or its id's
    forms (see the module docstring); ids themselves are not in it (they match as they are)."""
    ids = set(items.column("video_id").to_pylist()) | set(items.column("item_id").to_pylist())
    media = items.column("media_path").to_pylist() if "media_path" in items.column_names else [None] * items.num_rows
    seen: dict[str, set[str]] = {}
    for vid, path in zip(items.column("video_id").to_pylist(), media):
        for name in _forms(vid) | (_forms(path) if path else set()):
            seen.setdefault(name, set()).add(vid)
    return {name: next(iter(v)) for name, v in seen.items() if len(v) == 1 and name not in ids}


def with_dataset_video_ids(captions: pa.Table, items: pa.Table) -> tuple[pa.Table, int]:
    """`captions` with each `video_id` that is none of the items' ids replaced by the video it names through its
    media file (`video_aliases`), and how many rows were renamed so."""
    # which captions name an item's id, found on the columns: a set of every item's ids was ~15 MB of Python
    # strings at 100,000 items, left in the interpreter's arenas for the rest of a run (issue 30's scale RSS)
    # an items table from polars holds its strings as large or view strings: one type for the caption ids to meet
    given_type = captions.column("video_id").type
    chunks = [chunk.cast(given_type) for name in ("video_id", "item_id") for chunk in items.column(name).chunks]
    ids = pc.unique(pa.chunked_array(chunks, given_type))
    known = pc.is_in(captions.column("video_id"), value_set=ids)
    if pc.all(known).as_py() is not False:  # every one (or no captions)
        return captions, 0
    given = captions.column("video_id").to_pylist()
    aliases = video_aliases(items)
    renamed = [v if k else aliases.get(v.replace("\\", "/").removeprefix("./"), v)
               for v, k in zip(given, known.to_pylist())]
    n = sum(a != b for a, b in zip(given, renamed))
    if not n:
        return captions, 0
    groups = zip(*(captions.column(c).to_pylist() for c in ("captioner", "prompt_id", "frame_spec")))
    first: dict[tuple, str] = {}
    for group, old, new in zip(groups, given, renamed):
        if first.setdefault((*group, new), old) != old:  # two rows, one video: one would be judged twice
            raise UsageError(f"captions name video {new!r} twice, as {first[(*group, new)]!r} and {old!r} (one "
                             f"caption per video and captioner/prompt/frames)")
    at = captions.schema.get_field_index("video_id")
    return captions.set_column(at, captions.schema.field(at), pa.array(renamed, pa.string())), n
