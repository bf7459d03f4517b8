"""A `[[captions]]` cell's captions (engine/sweep/cells.py file_cell_captions): the file's rows plus a row without
text, and its failure, for every item the file does not caption; which items those are is found on the columns,
without a Python value per item (issue 30's scale RSS: ~15 MB at 100,000 items, left in the interpreter's arenas)."""

from __future__ import annotations

import tracemalloc
from types import SimpleNamespace

import pyarrow as pa

from capeval.engine.schemas import CAPTIONS, ITEMS, conform
from capeval.engine.sweep import accounting, cells


def _cell(path):
    source = SimpleNamespace(path=path, captioner="given", prompt_id=None, frame_spec=None, format=None,
                             id_field=None)
    caption = SimpleNamespace(source=source, captioner=SimpleNamespace(display="given"), prompt_id="file",
                              frame_spec="file")
    return SimpleNamespace(caption=caption, protocol=SimpleNamespace(name="capquiz"))


def test_uncaptioned_items_get_a_row_and_a_failure_without_a_python_value_per_item(tmp_path, monkeypatch):
    n_videos = 5_000
    items = conform(pa.table({
        "benchmark": ["capquiz"] * (4 * n_videos), "task": ["scene", "count", "object", "action"] * n_videos,
        "item_id": [f"v{v}/{k}" for v in range(n_videos) for k in range(4)],
        "video_id": [f"v{v}" for v in range(n_videos) for _ in range(4)]}), ITEMS)
    captioned = [f"v{v}" for v in range(n_videos - 2)] + ["v4999/1"]  # two videos not captioned, one item by id
    file_table = conform(pa.table({"captioner": ["given"] * len(captioned), "prompt_id": ["file"] * len(captioned),
                                   "frame_spec": ["file"] * len(captioned), "video_id": captioned,
                                   "text": [f"caption of {c}" for c in captioned],
                                   "caption_key": [f"key {c}" for c in captioned]}), CAPTIONS)
    monkeypatch.setattr(cells, "file_captions", lambda caption_cell: file_table)
    cell, data = _cell(tmp_path / "caps.jsonl"), SimpleNamespace(items=items)
    cells.file_cell_captions(cell, data)  # first-call set-up outside the measure
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        table, failures = cells.file_cell_captions(cell, data)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    missing = ["v4998/0", "v4998/1", "v4998/2", "v4998/3", "v4999/0", "v4999/2", "v4999/3"]
    assert list(failures) == missing and {f.status for f in failures.values()} == {accounting.NO_CAPTION}
    assert failures["v4998/0"].message == f"no caption for item 'v4998/0' (video 'v4998') in {tmp_path / 'caps.jsonl'}"
    assert table.num_rows == len(captioned) + len(missing)
    assert table.column("video_id").to_pylist()[-len(missing):] == missing
    assert table.column("caption_key").to_pylist()[-1] == "none:v4999/3"
    assert peak < 500_000, f"file_cell_captions held {peak / 1e6:.1f} MB of Python objects for 20,000 items"
