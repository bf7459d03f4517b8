"""Transcripts are stored compactly (issue 16: "a 1M-request sweep must not double its disk"): the transcript file
of N CapQuiz requests -- every column, replies and attempts included -- takes a small fraction of what storing each
rendered prompt (system + user) verbatim and uncompressed would. The prompts are CapQuiz's real ones over captions
and questions drawn from a 2,000-word vocabulary (so the captions themselves do not compress away); what is saved
is the template text every prompt repeats, the system prompt, and each caption shared by its video's questions.
The figure is printed (pytest -s)."""

from __future__ import annotations

import random

import pyarrow as pa

from capeval.adapters.base import JudgeResponse
from capeval.engine.judging.runner import run_judging
from capeval.engine.registry import lookup
from capeval.engine.schemas import CAPTIONS, ITEMS, conform
from capeval.engine.store.transcripts import TRANSCRIPTS, MemoryTranscripts, write_table

N_VIDEOS, QUESTIONS_PER_VIDEO = 200, 20  # 4,000 requests
MAX_SHARE = 0.15


class FirstChoiceJudge:
    """A backend double: answers every request with its first allowed choice."""

    name, revision = "first-choice", "1"

    def judge(self, requests):
        return [JudgeResponse(r.key, r.choices[0], prompt_tokens=len(r.user) // 4, completion_tokens=1,
                              latency_s=0.01) for r in requests]

    def close(self):
        pass


def _inputs(rng: random.Random):
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9))) for _ in range(2000)]

    def text(n: int) -> str:
        return " ".join(rng.choice(words) for _ in range(n))

    items = []
    for v in range(N_VIDEOS):
        for q in range(QUESTIONS_PER_VIDEO):
            options = [text(3) for _ in range(5)]
            items.append({"benchmark": "capquiz", "task": "capquiz", "item_id": f"v{v}-q{q}", "video_id": f"v{v}",
                          "annotation": text(12) + "?", "options": options, "answer": options[q % 5],
                          "category": "Entity"})
    items = conform(pa.Table.from_pylist(items), ITEMS)
    captions = conform(pa.table({
        "caption_key": [f"k{v}" for v in range(N_VIDEOS)], "captioner": ["m"] * N_VIDEOS,
        "prompt_id": ["p"] * N_VIDEOS, "frame_spec": ["f"] * N_VIDEOS, "video_id": [f"v{v}" for v in range(N_VIDEOS)],
        "text": [text(90) for _ in range(N_VIDEOS)]}), CAPTIONS)
    return items, captions


def test_transcripts_take_a_small_fraction_of_the_verbatim_prompts(tmp_path):
    items, captions = _inputs(random.Random(0))
    protocol = lookup("protocol", "capquiz")
    requests = protocol.build_requests(items, captions, judge="first-choice", judge_revision="1")
    sink = MemoryTranscripts()
    verdicts = run_judging(requests, FirstChoiceJudge(), cache_dir=tmp_path / "cache", protocol=protocol,
                           progress=False, transcripts=sink)
    table = sink.table()
    assert table.schema.equals(TRANSCRIPTS) and table.num_rows == verdicts.num_rows == N_VIDEOS * QUESTIONS_PER_VIDEO
    # exactly what was rendered, every row
    assert table.column("user").to_pylist() == requests.column("user").to_pylist()
    path = write_table(table, tmp_path / "transcripts.parquet")
    verbatim = sum(len((s or "").encode()) + len(u.encode())
                   for s, u in zip(requests.column("system").to_pylist(), requests.column("user").to_pylist()))
    share = path.stat().st_size / verbatim
    print(f"\n{table.num_rows} requests: prompts verbatim {verbatim / 1e6:.2f} MB, transcript file "
          f"{path.stat().st_size / 1e6:.3f} MB ({share:.1%}, every column included)")
    assert share < MAX_SHARE
