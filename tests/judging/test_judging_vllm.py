"""End to end on the real CPU vLLM engine (session fixture `vllm_judge`, a tiny random-weight model): every protocol's
requests are judged with structured outputs, parsed and counted. Asserts row counts, code validity and statuses,
not model quality (the weights are random). Also runs `capeval judge` with the local judge."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from capeval.engine.judging.runner import run_judging
from capeval.engine.registry import lookup
from capeval.engine.schemas import CAPTIONS, FRAMES, ITEMS, NO_VERDICT, ParseStatus, conform

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

VALID_CODES = {"capquiz": {0, 1, 2}, "capability": {0, 1, 2}, "vidcapbench": {0, 1, 2, 3},
               "lvcap": {0, 1, 2}, "vcinspector": {0, 1, 2, 3, 4}}


def _items(benchmark, rows):
    return conform(pa.table({k: [r.get(k) for r in rows] for k in ITEMS.names} | {"benchmark": [benchmark] * len(rows)}),
                   ITEMS)


@pytest.fixture(scope="module")
def judging_inputs(shared_data, tmp_path_factory):
    d = tmp_path_factory.mktemp("judge-inputs")
    dream = [json.loads(line) for line in open(shared_data / "dream1k" / "DREAM-1k.jsonl")][:2]
    vdc = json.loads(open(shared_data / "vdc" / "short.jsonl").readline())
    (vid, qas), = vdc.items()
    captions = conform(pa.table({
        "caption_key": [f"cap{i}" for i in range(2)], "captioner": ["m"] * 2, "prompt_id": ["p"] * 2,
        "frame_spec": ["f4"] * 2, "video_id": ["v0", "v1"],
        "text": [r["messages"][1]["content"][0]["reference"] for r in dream]}), CAPTIONS)
    np.save(d / "v0.npy", np.random.default_rng(0).integers(0, 255, (2, 32, 32, 3), dtype=np.uint8))
    frames = conform(pa.table({"frames_key": ["fk0"], "video_id": ["v0"], "frame_spec": ["f4"],
                               "path": [str(d / "v0.npy")]}), FRAMES)
    from capeval.engine.protocols.capability.release import load_items

    cap = load_items(shared_data / "capability" / "annotations", tasks=("object_color", "dynamic_object_number",
                                                                        "camera_movement"))
    cap_rows = [r for t in ("object_color", "dynamic_object_number", "camera_movement")
                for r in cap.filter(pa.compute.equal(cap["task"], t)).slice(0, 1).to_pylist()]
    for i, r in enumerate(cap_rows):
        r["video_id"] = f"v{i % 2}"
    items = {
        "capquiz": _items("capquiz", [{"task": "action", "item_id": "q0", "video_id": "v0", "annotation":
                                       "What happens first?", "options": ["a", "b", "c", "d", "e"], "answer": "c"}]),
        "capability": conform(pa.Table.from_pylist(cap_rows, schema=ITEMS), ITEMS),
        "vidcapbench": _items("vidcapbench", [{"task": "short", "item_id": f"vdc{i}", "video_id": "v1",
                                               "annotation": qa["question"], "answer": qa["answer"]}
                                              for i, qa in enumerate(qas[:2])]),
        "lvcap": _items("lvcap", [
            {"task": "scene", "item_id": "s0", "video_id": "v0", "annotation": "Is there fire?", "answer": "yes"},
            {"task": "events", "item_id": "e1", "video_id": "v1", "annotation":
             json.dumps(dream[1]["extra_info"]["events"][:3])}]),
        "vcinspector": _items("vcinspector", [{"task": "default", "item_id": "x0", "video_id": "v0"}]),
    }
    return items, captions, frames


@pytest.mark.parametrize("name", sorted(VALID_CODES))
def test_protocol_end_to_end_on_cpu_vllm(name, request, judging_inputs, tmp_path):
    items, captions, frames = judging_inputs
    # VC-Inspector's judge sees the frames: the suite's tiny multimodal engine; the others use the text engine.
    vllm_judge = request.getfixturevalue("vllm_vlm_judge" if name == "vcinspector" else "vllm_judge")
    p = lookup("protocol", name)
    seeds = (0, 1) if name == "vidcapbench" else (0,)
    reqs = p.build_requests(items[name], captions, judge=vllm_judge.name, judge_revision=vllm_judge.revision,
                            seeds=seeds, frames=frames)
    v, s = run_judging(reqs, vllm_judge, cache_dir=tmp_path, protocol=p, batch_size=16, max_reasks=1,
                       progress=False, return_summary=True)
    first_step = [st for st in reqs["step"].to_pylist() if st not in getattr(p, "intermediate_steps", ())]
    assert v.num_rows >= len(first_step) and s.sent > 0
    assert s.errors == 0 and s.missing == 0
    for code, status in zip(v["verdict"].to_pylist(), v["parse_status"].to_pylist()):
        assert status in (ParseStatus.OK, ParseStatus.REPAIRED, ParseStatus.FAILED)
        assert (code in VALID_CODES[name]) if status != ParseStatus.FAILED else code == NO_VERDICT
    if name == "vidcapbench":
        assert sorted(set(v["trial"].to_pylist())) == [0, 1] and set(v["step"].to_pylist()) == {"score"}
    if name == "lvcap":
        assert {"answer", "entail_r"} <= set(v["step"].to_pylist())
    again = run_judging(reqs, vllm_judge, cache_dir=tmp_path, protocol=p, max_reasks=1, progress=False,
                        return_summary=True)[1]  # same settings: every answer and re-ask comes from the cache
    assert again.sent == 0


def test_capeval_judge_cli_with_local_judge(judging_inputs, tmp_path, capsys):
    from capeval.engine.cli import main

    items, captions, _ = judging_inputs
    pq.write_table(items["capquiz"], tmp_path / "items.parquet")
    pq.write_table(captions, tmp_path / "captions.parquet")
    args = ["judge", "--protocol", "capquiz", "--items", str(tmp_path / "items.parquet"), "--captions",
            str(tmp_path / "captions.parquet"), "--judge", "local", "--cache", str(tmp_path / "cache"),
            "--out", str(tmp_path / "v.parquet"), "--no-progress"]
    assert main(args) == 0
    out = pq.read_table(tmp_path / "v.parquet")
    assert out.num_rows == 1 and "sent 1" in capsys.readouterr().out
    assert main(args) == 0
    assert "sent 0" in capsys.readouterr().out


def test_vllm_stream_keeps_the_engine_fed_and_answers_like_batches(vllm_judge, shared_data):
    """stream(): every request answered, at most max_in_flight unfinished in the engine, the same greedy answers as
    judge(batch); a request with temperature None (no sampling sent) gets the model's default sampling."""
    from capeval.adapters.base import JudgeRequest
    from capeval.engine.judging.window import WindowFeed

    with open(shared_data / "capability" / "captions" / "gpt-4o-0806" / "action.jsonl", encoding="utf-8") as fh:
        caps = [json.loads(line)["caption"][:300] for _, line in zip(range(4), fh)]
    reqs = [JudgeRequest(key=f"c{i}q{j}", system="Answer yes or no.", user=f"Caption: {c}\nQuestion {j}: is it day?",
                         choices=("yes", "no"), seed=j, max_tokens=4) for i, c in enumerate(caps) for j in range(3)]
    batch = vllm_judge.judge(reqs)
    engine = vllm_judge._llm.llm_engine
    feed = WindowFeed()
    for r in reqs:
        feed.put(r)
    out, peak = {}, 0
    for resp in vllm_judge.stream(feed, 4):
        peak = max(peak, engine.get_num_unfinished_requests() + 1)
        out[resp.key] = resp
        feed.done()
    assert set(out) == {r.key for r in reqs} and all(r.error is None for r in out.values())
    assert peak <= 4 and not engine.has_unfinished_requests()
    # the judge loop's default window: twice the batch vLLM chose for the engine (docs/judges.md)
    from capeval.engine.judging.window import judge_window

    assert judge_window(vllm_judge) == vllm_judge.max_in_flight == 2 * engine.vllm_config.scheduler_config.max_num_seqs
    assert [out[r.key].text for r in reqs] == [b.text for b in batch]
    free = JudgeRequest(key="none", user=f"Caption: {caps[0]}\nDescribe it.", temperature=None, max_tokens=6, seed=3)
    assert vllm_judge._sampling_params(free, 10).temperature == vllm_judge._default_sampling.get("temperature", 1.0)
    feed = WindowFeed()
    feed.put(free)
    answers = []
    for resp in vllm_judge.stream(feed, 4):
        answers.append(resp)
        feed.done()  # the consumer hands each answer back (the loop adds re-asks/next steps before this)
    (resp,) = answers
    assert resp.error is None and resp.text is not None and resp.completion_tokens >= 1
