"""The three generation steps of `capeval construct lvcap` (construction.py) and their reply parsers.

  narrative  the shot captions of one video -> its scenes, each a narrative paragraph (gt/scene_narrative)
  events     one scene's narrative -> its events (gt/extract_events)
  qa         yes/no questions about a scene (gt/scene_qa_generation): strict mode one ask per scene, official
             mode one ask per video for all its scenes, as the paper's Prompt3 asks

Strict mode (capeval's gt_pack.toml) asks for replies a parser can check and re-asks what fails: the narrative names
each scene's first and last shot (consecutive runs covering every shot, so each scene has a start and an end time);
events are a JSON array; questions are JSON Lines with a yes/no answer, at least the number asked for. Official mode
(the paper's Prompt1-3, read from the LVCap-Eval pack) sends the prompts as written with the inputs appended (the
paper does not say how they are attached: capeval's layout) and reads the layouts the prompts ask for: numbered
narratives in JSON Lines (no shot ranges, so scene times are unknown), events in JSON Lines, and the Prompt3 text
layout ("Scene: N", "Question K:", "Correct Answer: ..."). Official steps take the first reply (no retry rule is
published).
"""

from __future__ import annotations

import json
import re

from capeval.engine.construct.base import GenerationStep, ParseFailure
from capeval.engine.protocols.lvcap import paper_events
from capeval.engine.replies.repair import ParseError, extract_json, strip_fences

DIMENSIONS = ("temporal", "atmosphere", "emotion", "causality", "relations", "cinematic", "symbolism", "factuality")
_LOOSE_LINE = re.compile(r'^\{\s*"?([A-Za-z_ ]*\d+)"?\s*:\s*("(?:[^"\\]|\\.)*")\s*,?\s*\}$')


def json_lines(text: str | None) -> list[object]:
    """Every JSON value on its own line of the reply (code fences and prose lines skipped). A reply that is one JSON
    array is taken as its elements. A line that opens an object but is not JSON is an error: dropping it would lose
    a scene or a question without saying so. The paper's own narrative example has unquoted keys
    ({scene1: "..."}): such a line is read as {"scene1": "..."}."""
    if text is None or not text.strip():
        raise ParseFailure("empty reply")
    body, _ = strip_fences(text)
    try:
        whole = json.loads(body)
        if isinstance(whole, list):
            return whole
        if isinstance(whole, dict):
            return [whole]
    except (ValueError, RecursionError):
        pass
    out: list[object] = []
    for line in body.splitlines():
        s = line.strip().rstrip(",").strip()
        if not s.startswith("{"):
            continue
        try:
            out.append(json.loads(s))
            continue
        except (ValueError, RecursionError):
            pass
        loose = _LOOSE_LINE.match(s)
        if loose is None:
            raise ParseFailure(f"line {s[:80]!r} is not a JSON object")
        out.append({loose.group(1): json.loads(loose.group(2))})
    if not out:
        raise ParseFailure(f"no JSON Lines object in the reply: {text[:80]!r}")
    return out


def _positive_int(value) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip()) or None
    return None


class NarrativeStep(GenerationStep):
    name = "narrative"
    protocol = "lvcap"
    version = "1"

    def parse(self, context: dict, text: str) -> list[dict]:
        objects = json_lines(text)
        if context.get("mode") == "official":
            return _official_scenes(objects)
        return _strict_scenes(objects, int(context["n_shots"]))


def _strict_scenes(objects: list[object], n_shots: int) -> list[dict]:
    scenes = []
    for obj in objects:
        if not isinstance(obj, dict):
            raise ParseFailure(f"scene line {obj!r} is not an object"[:200])
        first, last = _positive_int(obj.get("first_shot")), _positive_int(obj.get("last_shot"))
        narrative = obj.get("narrative")
        if first is None or last is None or not isinstance(narrative, str) or not narrative.strip():
            raise ParseFailure("every scene needs first_shot, last_shot (shot numbers) and a narrative; got keys "
                               f"{sorted(obj)}"[:200])
        scenes.append({"first_shot": first, "last_shot": last, "narrative": narrative.strip()})
    expected = 1
    for s in scenes:  # consecutive runs of shots, in order, covering the video
        if s["first_shot"] != expected or s["last_shot"] < s["first_shot"]:
            raise ParseFailure(f"scenes must cover shots 1..{n_shots} in consecutive runs: a scene spans shots "
                               f"{s['first_shot']}-{s['last_shot']} where shot {expected} comes next")
        expected = s["last_shot"] + 1
    if expected != n_shots + 1:
        raise ParseFailure(f"the scenes end at shot {expected - 1} of {n_shots}")
    return [{"scene": i, **s} for i, s in enumerate(scenes, start=1)]


def _official_scenes(objects: list[object]) -> list[dict]:
    scenes = []
    for obj in objects:
        if not isinstance(obj, dict) or len(obj) != 1:
            raise ParseFailure(f"a scene line must be one key and its narrative, got {obj!r}"[:200])
        (value,) = obj.values()
        if not isinstance(value, str):
            raise ParseFailure(f"scene narrative {value!r} is not text"[:200])
        if value.strip():
            scenes.append({"scene": len(scenes) + 1, "narrative": value.strip()})
    if not scenes:
        raise ParseFailure("no scene narrative in the reply")
    return scenes


class EventsStep(GenerationStep):
    name = "events"
    protocol = "lvcap"
    version = "1"

    def parse(self, context: dict, text: str) -> list[str]:
        if context.get("mode") == "official":
            try:
                return paper_events.parse_extract(text)
            except ParseError as exc:
                raise ParseFailure(str(exc)) from None
        try:
            value, _ = extract_json(text, list)
        except ParseError as exc:
            raise ParseFailure(str(exc)) from None
        if not all(isinstance(e, str) for e in value):
            raise ParseFailure("events must be a JSON array of strings")
        return [e.strip() for e in value if e.strip()]


def _question(obj: dict) -> dict:
    """{dimension, question, answer (yes|no), analysis} of one question object, or ParseFailure."""
    question, answer = obj.get("question"), obj.get("answer", obj.get("correct_answer"))
    answer = answer.strip().strip("\"'*. ").lower() if isinstance(answer, str) else None
    if not isinstance(question, str) or not question.strip() or answer not in ("yes", "no"):
        raise ParseFailure(f"a question needs 'question' and 'answer' yes/no, got {obj!r}"[:200])
    dimension = obj.get("dimension")
    analysis = obj.get("analysis")
    return {"dimension": dimension.strip().lower() if isinstance(dimension, str) else None,
            "question": question.strip(), "answer": answer,
            "analysis": analysis.strip() if isinstance(analysis, str) else None}


class QAStep(GenerationStep):
    name = "qa"
    protocol = "lvcap"
    version = "1"

    def parse(self, context: dict, text: str):
        if context.get("mode") == "official":
            return parse_paper_qa(text, int(context["n_scenes"]))
        n = int(context["n_questions"])
        questions = [_question(o) for o in json_lines(text) if isinstance(o, dict)]
        if len(questions) < n:
            raise ParseFailure(f"{len(questions)} questions where {n} were asked for")
        return questions


_SCENE_HEAD = re.compile(r"^\W*scene\W*(\d+)\b", re.IGNORECASE | re.MULTILINE)
_QUESTION_HEAD = re.compile(r"^\W*question\s*(\d+)\s*\W*:\W*$", re.IGNORECASE | re.MULTILINE)
_FIELD = re.compile(r"^\W*(dimension|question|options|correct answer|analysis)\W*:\s*(.*)$", re.IGNORECASE)


def parse_paper_qa(text: str | None, n_scenes: int) -> dict[str, list[dict]]:
    """The paper's Prompt3 layout -> {scene number (text): [questions]}: blocks opened by "Scene: N", in each block
    "Question K:" headings followed by Dimension / Question / Options / Correct Answer / Analysis lines (markdown
    emphasis and quotes tolerated). A block whose number is not a scene of the video, or a reply with no complete
    question, is an error; a scene with no questions is left out (the record says so)."""
    if text is None or not text.strip():
        raise ParseFailure("empty reply")
    heads = list(_SCENE_HEAD.finditer(text))
    if not heads:
        raise ParseFailure("no 'Scene: N' block in the reply")
    out: dict[str, list[dict]] = {}
    for i, head in enumerate(heads):
        scene = int(head.group(1))
        if not 1 <= scene <= n_scenes:
            raise ParseFailure(f"scene {scene} in the reply; the video has {n_scenes} scenes")
        block = text[head.end(): heads[i + 1].start() if i + 1 < len(heads) else len(text)]
        starts = list(_QUESTION_HEAD.finditer(block))
        for j, q in enumerate(starts):
            fields: dict[str, str] = {}
            part = block[q.end(): starts[j + 1].start() if j + 1 < len(starts) else len(block)]
            for line in part.splitlines():
                m = _FIELD.match(line.strip())
                if m:
                    fields.setdefault(m.group(1).lower(), m.group(2).strip().strip("*").strip())
            if "question" in fields and "correct answer" in fields:
                out.setdefault(str(scene), []).append(_question(
                    {"question": fields["question"], "answer": fields["correct answer"],
                     "dimension": fields.get("dimension"), "analysis": fields.get("analysis")}))
    if not out:
        raise ParseFailure("no complete question (Question and Correct Answer lines) in the reply")
    return out
