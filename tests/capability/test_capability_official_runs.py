"""CAPability official mode follows eval.py's run-level rules (issue 26 item 15; shared/protocols/README.md, eval.py
@ cebb82a: `evaluate` judges the tasks in order, `intialize_data_by_task` asserts every annotated file has a caption,
the retry loop breaks before its first round when at most max_allow_missing (5) items are missing):

* a task of at most 5 items gets no judge call: nothing reaches the judge's HTTP server (a loopback server counts);
* an item without a caption stops the script at its task: that task, every task after it in the official order and
  the average get no figure; the tasks before it keep theirs;
* released judgments with more than 5 items unjudged in a task are not where an official run ends (it would re-ask):
  `capeval capability score` says so per task, with the count."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from capeval.adapters.replay import ReplayJudge
from capeval.engine.cli import main
from capeval.engine.judging.runner import run_judging
from capeval.engine.protocols.capability.metrics import compute_metrics
from capeval.engine.registry import lookup
from capeval.engine.schemas import CAPTIONS, ITEMS, conform

ROOT = Path(__file__).resolve().parents[2]
PACK = Path(os.environ.get("CAPEVAL_PACK_DIR", ROOT.parent / "shared" / "protocols")) / "capability.toml"
RELEASE = ROOT.parent / "shared" / "data" / "capability"


def _bodies_module():
    spec = importlib.util.spec_from_file_location(
        "_official_request_bodies", ROOT / "tests" / "judging" / "test_official_request_bodies.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pack() -> str:
    if not PACK.is_file():
        pytest.skip(f"{PACK} not present")
    return str(PACK)


def _tables(tasks: dict[str, int], uncaptioned: set[str] = frozenset()):
    rows = [{"task": task, "item_id": f"{task}-{i}", "video_id": f"{task}-{i}", "annotation": f"thing {i}",
             "media_type": "image"} for task, n in tasks.items() for i in range(n)]
    items = conform(pa.table({k: [r.get(k) for r in rows] for k in ITEMS.names}
                             | {"benchmark": ["capability"] * len(rows)}), ITEMS)
    videos = [r["video_id"] for r in rows if r["item_id"] not in uncaptioned]
    n = len(videos)
    captions = conform(pa.table({"caption_key": [f"k-{v}" for v in videos], "captioner": ["m"] * n,
                                 "prompt_id": ["p"] * n, "frame_spec": ["f"] * n, "video_id": videos,
                                 "text": [f"A picture of thing {v.rsplit('-', 1)[1]}." for v in videos]}), CAPTIONS)
    return items, captions


@pytest.mark.parametrize("n_items, asked", [(1, False), (5, False), (6, True)])
def test_a_task_of_at_most_five_items_sends_no_judge_call(n_items, asked, tmp_path):
    bodies = _bodies_module()
    items, captions = _tables({"scene": n_items})
    with bodies.CaptureServer(lambda body, n: '{"scene": "x", "score": 1}') as server:
        verdicts = bodies._judge_through(server, "capability", items, captions, tmp_path, mode="official",
                                         prompts=_pack())
    assert len(server.bodies) == (n_items if asked else 0)
    errors = {v["error"] for v in verdicts}
    if asked:
        assert errors == {None} and {v["verdict"] for v in verdicts} == {1}
    else:
        assert len(errors) == 1 and "makes no judge call" in errors.pop()
        metrics = compute_metrics(pl.from_arrow(pa.Table.from_pylist(verdicts)), items=pl.from_arrow(items),
                                  n_resamples=0, mode="official")
        scene = metrics.filter(pl.col("task") == "scene")
        assert scene["value"].is_null().all() and scene["note"].str.contains("max_allow_missing=5").all()


def test_an_item_without_a_caption_stops_the_later_tasks_too(tmp_path):
    # official order: object_category, ..., scene, ..., event
    tasks = {"object_category": 6, "scene": 6, "event": 6}
    items, captions = _tables(tasks, uncaptioned={"scene-2"})
    replies = [{"item_id": f"{t}-{i}", "step": "judge", "text": '{"score": 1}'} for t, n in tasks.items()
               for i in range(n)]
    judge = ReplayJudge(replies)
    protocol = lookup("protocol", "capability")
    params = {"mode": "official", "prompts": _pack()}
    requests = protocol.build_requests(items, captions, judge=judge.name, judge_revision=judge.revision, **params)
    verdicts = run_judging(requests, judge, cache_dir=tmp_path / "cache", protocol=protocol, protocol_params=params,
                           progress=False)
    metrics = compute_metrics(pl.from_arrow(verdicts), items=pl.from_arrow(items), captions=pl.from_arrow(captions),
                              n_resamples=0, mode="official")
    before = metrics.filter(pl.col("task") == "object_category")
    assert before["value"].is_not_null().all() and before["note"].is_null().all(), before
    stopped = metrics.filter(pl.col("task") == "scene")
    assert stopped["value"].is_null().all() and stopped["note"].str.contains("no caption").all()
    after = metrics.filter(pl.col("task") == "event")
    assert after.height == 4 and after["value"].is_null().all(), after
    assert after["note"].str.contains("stops before this task").all() and \
        after["note"].str.contains("'scene'").all(), after["note"].to_list()
    assert metrics.filter(pl.col("task") == "avg")["value"].is_null().all()


def test_released_judgments_with_more_than_five_unjudged_in_a_task_say_so(tmp_path, capsys):
    model = RELEASE / "judgments" / "llava_ov_7b_hf"
    if not model.is_dir():
        pytest.skip("released CAPability judgments not present")
    annotations = RELEASE / "annotations"
    unjudged = {}
    for task_file in sorted(annotations.glob("*.jsonl")):
        ids = {line.split('"file_id"', 1)[1].split('"')[1] for line in task_file.read_text().splitlines() if line}
        judged = {line.split('"file_id"', 1)[1].split('"')[1]
                  for line in (model / task_file.name).read_text().splitlines() if line}
        unjudged[task_file.stem] = len(ids - judged)
    assert max(unjudged.values()) > 5, unjudged  # camera_angle: 15
    code = main(["capability", "score", "--annotations", str(annotations), "--judgments", str(model),
                 "--out", str(tmp_path / "scores.csv"), "--resamples", "0"])
    err = capsys.readouterr().err
    assert code == 0
    for task, n in unjudged.items():
        said = f"note: {task}: {n} items have no judgment, more than the official max_allow_missing (5)"
        assert (said in err) == (n > 5), (task, n, err)
    assert "would re-ask" in err
    assert ": .\n" not in err  # no empty note per task
