"""JudgePool over a real local Ray: same outputs as the engine directly, request order, caption groups kept whole,
dead actors restarted and their batches retried (actor death is real: the worker process exits)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from capeval.adapters.base import Judge, JudgeRequest, JudgeResponse
from capeval.adapters.ray_pool import JudgePool, group_key, grouped_batches


def _grouped_requests(shared_data: Path, n_captions: int, n_questions: int, **kw) -> list[JudgeRequest]:
    with open(shared_data / "capability" / "captions" / "gpt-4o-0806" / "action.jsonl", encoding="utf-8") as fh:
        caps = [json.loads(line)["caption"] for _, line in zip(range(n_captions), fh)]
    with open(shared_data / "vdc" / "detailed.jsonl", encoding="utf-8") as fh:
        qs = [q["question"] for q in next(iter(json.loads(fh.readline()).values()))][:n_questions]
    return [JudgeRequest(key=f"c{i}q{j}", system="Answer yes or no.", user=f"Caption: {c}\nQuestion: {q}",
                         fields={"caption": c}, seed=j, **kw)
            for i, c in enumerate(caps) for j, q in enumerate(qs)]  # fmt: skip


def test_grouped_batches_never_split_a_caption_group(shared_data):
    reqs = _grouped_requests(shared_data, 5, 3)  # groups of 3
    batches = grouped_batches(reqs, batch_size=7)
    assert [i for b in batches for i in b] == list(range(len(reqs)))
    assert [len(b) for b in batches] == [6, 6, 3]  # two whole groups fit in 7, a third would not
    for b in batches:
        starts = {group_key(reqs[i]) for i in b}
        for g in starts:
            members = [i for i, r in enumerate(reqs) if group_key(r) == g]
            assert set(members) <= set(b)
    # A single group larger than the batch is cut into full batches.
    assert [len(b) for b in grouped_batches(_grouped_requests(shared_data, 1, 10), batch_size=4)] == [4, 4, 2]


@pytest.mark.vllm
def test_pool_of_vllm_actors_matches_the_engine(vllm_judge, tiny_lm_dir, ray_local, shared_data):
    reqs = _grouped_requests(shared_data, 3, 4, choices=("yes", "no", "unclear"), max_tokens=4)
    pool = JudgePool("vllm", {"model": str(tiny_lm_dir), "name": vllm_judge.name, "max_model_len":
                              vllm_judge.max_model_len}, num_actors=1, batch_size=64)  # fmt: skip
    try:
        assert isinstance(pool, Judge)
        assert (pool.name, pool.revision) == (vllm_judge.name, vllm_judge.revision)
        via_pool = pool.judge(reqs)
        direct = vllm_judge.judge(reqs)
        assert [r.key for r in via_pool] == [r.key for r in reqs]
        assert [r.text for r in via_pool] == [r.text for r in direct]
        assert [r.prompt_tokens for r in via_pool] == [r.prompt_tokens for r in direct]
        assert all(r.error is None for r in via_pool)
        assert sum(r.cached_prompt_tokens for r in via_pool) > 0  # caption groups reached one engine together
    finally:
        pool.close()


def test_dead_actor_is_restarted_and_its_batch_retried(ray_local, shared_data, tmp_path):
    marker = tmp_path / "died-once"

    class DiesOnceJudge:  # local class: Ray ships it by value to the workers
        name, revision = "dies-once", "r1"

        def __init__(self, marker: str):
            self.marker = Path(marker)

        def judge(self, requests):
            if not self.marker.exists():
                self.marker.touch()
                os._exit(1)  # a real worker death mid-batch
            return [JudgeResponse(key=r.key, text=r.user[::-1], prompt_tokens=len(r.user)) for r in requests]

        def close(self):
            pass

    reqs = _grouped_requests(shared_data, 6, 4)
    pool = JudgePool(DiesOnceJudge, {"marker": str(marker)}, num_actors=2, num_cpus_per_actor=0.5, batch_size=5,
                     batches_per_actor=2, max_restarts=2)  # fmt: skip
    try:
        out = pool.judge(reqs)
    finally:
        pool.close()
    assert marker.exists()
    assert [r.key for r in out] == [r.key for r in reqs]
    assert [r.text for r in out] == [r.user[::-1] for r in reqs]
    assert all(r.error is None for r in out)


def test_batch_of_an_always_dying_judge_gets_per_request_errors(ray_local, shared_data):
    class AlwaysDies:
        name, revision = "always-dies", "r1"

        def judge(self, requests):
            os._exit(1)

        def close(self):
            pass

    reqs = _grouped_requests(shared_data, 2, 2)
    pool = JudgePool(AlwaysDies, num_actors=1, num_cpus_per_actor=0.5, batch_size=2, max_restarts=5, batch_retries=1)
    try:
        out = pool.judge(reqs)
    finally:
        pool.close()
    assert [r.key for r in out] == [r.key for r in reqs]
    assert all(r.text is None and "died 2 times" in r.error for r in out)


def test_stream_actors_pull_work_so_a_slow_actor_never_stalls_the_rest(ray_local, shared_data, tmp_path):
    import time
    from collections import Counter

    from capeval.engine.judging.window import WindowFeed

    class MaybeSlow:  # the first actor to create the marker directory is slow (1.5 s per batch)
        name, revision = "maybe-slow", "r1"

        def __init__(self, lock_dir: str):
            try:
                os.mkdir(Path(lock_dir) / "slow")
                self.slow = True
            except FileExistsError:
                self.slow = False

        def judge(self, requests):
            time.sleep(1.5 if self.slow else 0.01)
            return [JudgeResponse(key=r.key, text="slow" if self.slow else "fast") for r in requests]

        def close(self):
            pass

    reqs = _grouped_requests(shared_data, 20, 4)  # 80 requests in caption groups of 4
    pool = JudgePool(MaybeSlow, {"lock_dir": str(tmp_path)}, num_actors=2, num_cpus_per_actor=0.5, batch_size=4,
                     batches_per_actor=1)
    feed = WindowFeed()
    for r in reqs:
        feed.put(r)
    out = []
    try:
        t0 = time.monotonic()
        for resp in pool.stream(feed, 8):
            out.append(resp)
            feed.done()
        wall = time.monotonic() - t0
    finally:
        pool.close()
    assert sorted(r.key for r in out) == sorted(r.key for r in reqs) and all(r.error is None for r in out)
    by_actor = Counter(r.text for r in out)
    # batch by batch over both actors (today's judge()) the slow one would take half: 10 batches x 1.5 s
    assert by_actor["slow"] <= 8 and by_actor["fast"] >= 72, by_actor
    assert wall < 1.5 * 3, wall
