"""A sweep's checks plan which protocol judges which dataset (engine/sweep/pairs.py) and hand their plan on
(`SweepConfig.pairs`): the media check and the run's grid reuse each pair's item checks for the table the checks
read, instead of checking a large table three times; a different table is checked again."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from capeval.engine.protocols.capquiz import CapQuizProtocol
from capeval.engine.sweep.config import load_sweep
from capeval.engine.sweep.datasets import load_dataset, media_required
from capeval.engine.sweep.grid import expand
from capeval.engine.sweep.pairs import plan_pairs

from _sweeps import write_sweep


def _sweep(tmp_path: Path) -> Path:
    items, captions = tmp_path / "items.jsonl", tmp_path / "captions.jsonl"
    with items.open("w") as fi, captions.open("w") as fc:
        for v in range(3):
            fc.write(json.dumps({"video_id": f"v{v}", "caption": f"a red circle {v}", "captioner": "given"}) + "\n")
            options = [f"option {k}" for k in range(5)]
            fi.write(json.dumps({"benchmark": "capquiz", "task": "scene", "item_id": f"v{v}/scene",
                                 "video_id": f"v{v}", "media_type": "video", "annotation": "which?",
                                 "options": options, "answer": options[v]}) + "\n")
    return write_sweep(tmp_path / "pairs.toml", "pairs", prompts=(), frames=(),
                       dataset={"name": "quiz", "kind": "items", "path": str(items)},
                       captioners=(), captions=[{"path": str(captions)}], options={"n_resamples": None})


def test_the_checks_plan_is_reused_by_the_media_check_and_the_grid(tmp_path, monkeypatch):
    calls = []
    original = CapQuizProtocol.items_problems

    def counted(self, items, source=None):
        calls.append(items.num_rows)
        return original(self, items, source)

    monkeypatch.setattr(CapQuizProtocol, "items_problems", counted)
    config = load_sweep(_sweep(tmp_path))
    assert calls == [3]  # the checks
    assert config.pairs is not None and config.pairs.judges(0, "quiz")
    spec = config.datasets[0]
    assert media_required(config, spec) is False  # a text-only protocol on given captions needs no media
    loaded = load_dataset(spec, out_dir=tmp_path / "out", sweep_dir=tmp_path, require_media=False)
    cells = expand(config, {"quiz": loaded})
    assert len(cells) == 1 and calls == [3]  # neither the media check nor the grid checked the items again
    # a plan that is not handed the checks' plan checks the pair itself, and so does one given another table
    plan_pairs(config, {"quiz": loaded})
    assert calls == [3, 3]
    other = pa.Table.from_pylist(loaded.items.to_pylist(), schema=loaded.items.schema)
    view = type("View", (), {"items": other, "videos": loaded.videos})()
    assert plan_pairs(config, {"quiz": view}, checked=config.pairs).judges(0, "quiz")
    assert calls == [3, 3, 3]


def test_protocol_items_hands_back_a_one_benchmark_table_itself_and_filters_a_mixed_one():
    # a cell holds its items for the whole run: a filtered copy of a table whose rows all match was a second copy
    # of the dataset's items (24 MB at 100,000 items, issue 30's scale RSS)
    from capeval.engine.sweep.pairs import protocol_items

    mine = pa.table({"benchmark": ["capquiz", "capquiz"], "item_id": ["a", "b"]})
    assert protocol_items(mine, "capquiz") is mine
    other = pa.table({"benchmark": ["vdc", "vdc"], "item_id": ["a", "b"]})
    assert protocol_items(other, "capquiz") is other  # no row names it: all of them, as before
    mixed = pa.table({"benchmark": ["capquiz", "vdc", None, "capquiz"], "item_id": ["a", "b", "c", "d"]})
    assert protocol_items(mixed, "capquiz").column("item_id").to_pylist() == ["a", "d"]
    with_null = pa.table({"benchmark": ["capquiz", None], "item_id": ["a", "b"]})
    assert protocol_items(with_null, "capquiz").column("item_id").to_pylist() == ["a"]
