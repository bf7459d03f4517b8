"""Inputs and a scripted judge for the VC-Inspector construction tests.

`ScriptedJudge` answers the augmentation chain the way a careful LLM would, from the request's backend fields
(capeval.adapters.base.JudgeRequest.fields): the element lists of the source captions below, a fixed alternative per element
and the substitution done by text replacement; in the layout of the run's mode (official: a Python list literal or
bare text; strict: JSON). It counts its calls and keeps what it was sent. Run as a script it does one construction run
and, with EXIT_AFTER, dies like kill -9 (os._exit) after that many answers: the kill-and-resume test."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OFFICIAL_PACK = ROOT.parent / "shared" / "protocols" / "vcinspector.toml"

# video_id, ground-truth caption, objects, actions. "play" does not occur as written ("plays"): strict mode asks the
# LLM for that substitution; every other element is replaced as written.
SOURCES = [
    ("v1", "A man plays a guitar in a park.", ["man", "guitar", "park"], ["play"]),
    ("v2", "A red circle and a blue square move across a green background.",
     ["red circle", "blue square", "green background"], ["move across"]),
    ("v3", "A girl throws a ball to a dog, and the dog catches it.", ["girl", "ball", "dog"], ["throws", "catches"]),
    ("v4", "Two chefs chop onions and stir a pot.", ["chefs", "onions", "pot"], ["chop", "stir"]),
]
ALTERNATIVES = {"man": "woman", "guitar": "violin", "park": "beach", "play": "tune", "red circle": "yellow triangle",
                "blue square": "white star", "green background": "grey background", "move across": "rest on",
                "girl": "boy", "ball": "frisbee", "dog": "cat", "throws": "hides", "catches": "ignores",
                "chefs": "waiters", "onions": "carrots", "pot": "pan", "chop": "wash", "stir": "taste"}


def write_source(path: Path, media: dict | None = None, sources=SOURCES) -> Path:
    rows = [{"video_id": v, "caption": c, **({"media_path": str(media[v])} if media and v in media else {})}
            for v, c, *_ in sources]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def replay_replies(sources=SOURCES) -> list[dict]:
    """Strict-mode replies for the replay judge, keyed by (item_id, step, sub_index): extraction per caption and an
    alternative for every element (sources whose elements all occur as written need no substitution reply)."""
    out = []
    for v, _, objects, actions in sources:
        out.append({"item_id": v, "step": "extract_objects", "text": json.dumps({"objects": objects})})
        out.append({"item_id": v, "step": "extract_actions", "text": json.dumps({"actions": actions})})
        for kind, elements in (("new_object", objects), ("new_action", actions)):
            out += [{"item_id": v, "step": kind, "sub_index": j, "text": json.dumps({"replacement": ALTERNATIVES[e]})}
                    for j, e in enumerate(elements)]
    return out


class ScriptedJudge:
    name = "scripted"
    revision = "scripted-1"

    def __init__(self, mode: str, exit_after: int | None = None, sources=SOURCES):
        self.mode, self.exit_after, self.sources = mode, exit_after, sources
        self.calls = 0
        self.sent: list = []  # (step, request) in the order sent

    def _answer(self, step: str, fields) -> str:
        official = self.mode == "official"
        if step.startswith("extract_"):
            v, c, objects, actions = next(s for s in self.sources if s[1] == fields["caption"])
            values = objects if step == "extract_objects" else actions
            return repr(values) if official else json.dumps({step.split("_")[1]: values})
        if step in ("new_object", "new_action"):
            new = ALTERNATIVES[fields["element"]]
            return new if official else json.dumps({"replacement": new})
        caption = fields["caption"].replace(fields["old"], fields["new"])
        return caption if official else json.dumps({"caption": caption})

    def judge(self, requests):
        from capeval.adapters.base import JudgeResponse

        out = []
        for r in requests:
            if self.exit_after is not None and self.calls >= self.exit_after:
                os._exit(9)  # like kill -9: no cleanup, no flush beyond what the cache already committed
            self.calls += 1
            step = r.task.split("/")[-1]
            self.sent.append((step, r))
            out.append(JudgeResponse(r.key, self._answer(step, r.fields)))
        return out

    def close(self) -> None:
        pass


def run_construct(out: Path, mode: str, judge, *, source: Path, samples: int = 4, variants: str | None = None,
                  roles: dict | None = None, judges: dict | None = None, max_in_flight: int = 64):
    """One `capeval construct vcinspector` run in this process with the given judge(s); returns the output paths."""
    from capeval.engine.construct import lookup
    from capeval.engine.construct.base import ConstructContext
    from capeval.engine.construct.outputs import write_outputs

    pipeline = lookup("vcinspector")
    args = argparse.Namespace(source=source, samples=samples, variants=variants, seed=0, limit=None, mode=mode,
                              out=out, prompts=str(OFFICIAL_PACK) if mode == "official" else None)
    pipeline.check(args)
    judges = judges or {"scripted": judge}
    ctx = ConstructContext("vcinspector", mode, pipeline.pack(mode, args.prompts), out / "judge-cache",
                           roles=roles or {"*": ["scripted"]}, factory=lambda label: judges[label], progress=False,
                           max_in_flight=max_in_flight)
    try:
        result = pipeline.run(args, ctx)
        return write_outputs(out, result, ctx, started=0.0, config={})
    finally:
        ctx.close()


if __name__ == "__main__":  # python _vcinspector_inputs.py OUT MODE EXIT_AFTER
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    out_dir, run_mode, after = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    run_construct(out_dir, run_mode, ScriptedJudge(run_mode, exit_after=after), source=out_dir / "source.jsonl",
                  max_in_flight=1)
