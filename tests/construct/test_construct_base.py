"""The construction machinery (engine/construct/base.py): a step's asks go through the judging path with the
judgment cache (a second run sends nothing), parse into payloads or recorded failures, and land in the record."""

from __future__ import annotations

import json

import pytest

from capeval.adapters.replay import ReplayJudge
from capeval.engine.construct.base import (Ask, ConstructContext, GenerationStep, ParseFailure, RecordLog, render_asks,
                                   run_step)
from capeval.engine.packs import load_pack

PACK = """
[meta]
benchmark = "toy"

[[prompt]]
id = "construct/words"
user = "Write {n} words about {topic}, as a JSON list."
"""


class WordsStep(GenerationStep):
    name = "words"
    protocol = "toy"

    def parse(self, context, text):
        try:
            words = json.loads(text)
        except json.JSONDecodeError:
            raise ParseFailure(f"not JSON: {text[:40]!r}") from None
        if not isinstance(words, list) or len(words) != context["n"]:
            raise ParseFailure(f"expected a list of {context['n']} words")
        return words


class CountingReplay(ReplayJudge):
    def __init__(self, replies):
        super().__init__(replies)
        self.keys: list[str] = []

    def judge(self, requests):
        self.keys += [r.key for r in requests]
        return super().judge(requests)


@pytest.fixture()
def ctx(tmp_path):
    pack_path = tmp_path / "toy.toml"
    pack_path.write_text(PACK)
    return ConstructContext("toy", "strict", load_pack(pack_path), tmp_path / "cache", roles={"*": ["replay"]},
                            progress=False)


def _asks():
    return [Ask(item_id=f"v{i}", video_id=f"v{i}", prompt_id="construct/words", fields={"n": 2, "topic": t},
                context={"n": 2}) for i, t in enumerate(("cats", "rain", "boats"))]


def test_step_generates_caches_and_records(ctx):
    replies = [{"item_id": "v0", "step": "words", "text": '["purr", "nap"]'},
               {"item_id": "v1", "step": "words", "text": '["drops", "grey"]'},
               {"item_id": "v2", "step": "words", "text": "boats are nice"},  # unusable: re-asked in strict mode
               {"item_id": "v2", "step": "words", "attempt": 1, "text": '["hull", "sail"]'}]
    judge = CountingReplay(replies)
    got = run_step(WordsStep(), _asks(), ctx, judge)
    assert [g.payload for g in got] == [["purr", "nap"], ["drops", "grey"], ["hull", "sail"]]
    assert [g.attempt for g in got] == [0, 0, 1] and all(g.ok for g in got)
    assert len(judge.keys) == 4 and ctx.stats["words"].sent == 4

    again = CountingReplay(replies)  # same pack, inputs and judge: every answer comes from the cache
    got2 = run_step(WordsStep(), _asks(), ctx, again)
    assert again.keys == [] and [g.payload for g in got2] == [g.payload for g in got]
    assert [g.request_key for g in got2] == [g.request_key for g in got]

    log = RecordLog("toy")
    for g in got:
        log.generated("words", g)
    table = log.table()
    assert table.column("kept").to_pylist() == [True] * 3
    assert json.loads(table.column("output").to_pylist()[2]) == ["hull", "sail"]
    assert table.column("request_key").to_pylist() == [g.request_key for g in got]


def test_failure_is_recorded_with_its_reason(ctx):
    judge = CountingReplay([{"item_id": f"v{i}", "step": "words", "attempt": a, "text": "no list"}
                            for i in range(3) for a in range(3)])
    got = run_step(WordsStep(), _asks(), ctx, judge)
    assert not any(g.ok for g in got) and all("not JSON" in g.error for g in got)
    log = RecordLog("toy")
    log.generated("words", got[0])
    row = log.table().to_pylist()[0]
    assert row["kept"] is False and row["reason"].startswith("generation failed: not JSON")
    assert row["output"] == "no list"  # the raw reply, when nothing parsed


def test_keys_follow_the_pack_and_the_prompt(ctx, tmp_path):
    judge = CountingReplay([])
    first = render_asks(WordsStep(), _asks(), ctx, judge).column("request_key").to_pylist()
    other = tmp_path / "other.toml"
    other.write_text(PACK.replace("Write", "Give"))
    ctx2 = ConstructContext("toy", "strict", load_pack(other), ctx.cache_dir)
    second = render_asks(WordsStep(), _asks(), ctx2, judge).column("request_key").to_pylist()
    assert len(set(first)) == 3 and not set(first) & set(second)
    with pytest.raises(ValueError, match="two asks"):
        render_asks(WordsStep(), _asks() + _asks()[:1], ctx, judge)
