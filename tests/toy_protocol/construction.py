"""The toy protocol's construction pipeline, `capeval construct toy`: toy_mention items from a list of words.

  visible  one judge request per word ("can it be seen in a video?", yes or no, through the judging path: cached,
           resumable); a word answered "yes" becomes an item whose `answer` is the word toy_mention asks captions
           about; "no" and unusable replies are recorded with the reason, never turned into items.

It exists to prove the `construction` hook (capeval.engine.protocols.base.JudgeProtocol): a protocol installed from
another distribution brings `capeval construct` its own pipeline, under its own name, with no engine file edited
(tests/construct/test_toy_construction.py).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from capeval.engine.construct.base import Ask, ConstructContext, GenerationStep, ParseFailure, RecordLog, run_step
from capeval.engine.construct.pipeline import ConstructionPipeline, PipelineResult
from capeval.engine.errors import UsageError
from capeval.engine.packs import load_pack
from capeval.engine.schemas import ITEMS

PACK = Path(__file__).resolve().parent / "construction_pack.toml"


class VisibleStep(GenerationStep):
    name = "visible"
    protocol = "toy_mention"

    def parse(self, context: dict, text: str) -> str:
        answer = (text or "").strip().lower().rstrip(".")
        if answer not in ("yes", "no"):
            raise ParseFailure(f"expected yes or no, got {answer[:40]!r}")
        return answer


class ToyPipeline(ConstructionPipeline):
    name = "toy"
    summary = "toy_mention items from the words a judge says can be seen in a video"
    steps = ("visible",)

    def add_arguments(self, parser) -> None:
        parser.add_argument("--words", required=True, help="comma-separated words, one candidate item each")
        parser.add_argument("--video", default="clip", help="the video id of every item (default: clip)")

    def pack(self, mode, prompts):
        if mode == "official":
            raise UsageError("construct toy has no official mode: it has no benchmark pack")
        return load_pack(prompts or PACK)

    def check(self, args) -> None:
        if not _words(args):
            raise UsageError("--words: give at least one word")

    def run(self, args, ctx: ConstructContext) -> PipelineResult:
        step = VisibleStep()
        asks = [Ask(item_id=word, video_id=args.video, prompt_id="construct/visible", task="mention",
                    fields={"word": word}, backend_fields={"word": word}, choices=("yes", "no"), max_tokens=4)
                for word in _words(args)]
        log = RecordLog(self.name)
        items = []
        for g in run_step(step, asks, ctx, ctx.judges_for(step.name)[0][1]):
            seen = g.ok and g.payload == "yes"
            log.generated(step.name, g, kept=seen, reason=None if not g.ok else
                          "can be seen" if seen else "the judge says it cannot be seen")
            if seen:
                items.append({"benchmark": "toy_mention", "task": "mention", "item_id": g.ask.item_id,
                              "video_id": g.ask.video_id, "answer": g.ask.item_id})
        return PipelineResult(pa.Table.from_pylist(items, schema=ITEMS), log)


def _words(args) -> list[str]:
    return list(dict.fromkeys(w.strip() for w in args.words.split(",") if w.strip()))


PIPELINE = ToyPipeline()
