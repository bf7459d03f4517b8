"""CAPability-QA: the release's annotations turned into questions for the captioning model (paper §3.3, App. B.4).

The paper converts each annotated element into a question (its Fig. A5 shows one per dimension) so that the same
model can be asked directly what its caption should have said; KT ("know but cannot tell", Eq. 4) then compares the
two. The official repository has no QA code and the pack no QA prompts, so the wording below is capeval's own; the
shape follows the paper:

* multiple choice for most dimensions, open questions for object_color, OCR and character_identification (the
  paper's text names exactly these three as open). Fig. A5 also prints spatial_relation without options; its text
  does not list it among the open ones, and its annotation is a whole sentence, so capeval asks it as a yes/no
  question about that sentence (docs/construct.md says so);
* presence dimensions (object_category, scene, spatial_relation, action, event) ask whether the annotated element is
  there, options Yes / No / Can't tell, answer Yes (every annotation is a present element: always answering "Yes"
  scores 100% here, which is why KT, not QA accuracy, is the metric of interest);
* object_number / dynamic_object_number (one question per annotated object, `sub_index` in annotation order as the
  caption verdicts have it): the count and three distractors, shuffled;
* camera_angle / camera_movement / style: the annotated category and three other categories of the task, in the
  category list's order (as Fig. A5 shows them).

Distractors and positions come from a seed derived from (seed, task, item, object), so the questions are the same on
every run and machine. `parse_choice` is the documented letter parser that grades multiple-choice answers; open
answers are graded by a judge (engine/protocols/capability/kt_grading.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa

from capeval.engine.keys import content_key, derived_seed

from .codes import TASKS
from capeval.engine.protocols.capability.prompts import categories, pack_for

QA_VERSION = "1"  # enters every question id: bump when the wording or the option rules change
LETTERS = "ABCDEFGH"
YES_NO = ("Yes", "No", "Can't tell")
OPEN_TASKS = ("object_color", "OCR", "character_identification")
PRESENCE_TASKS = ("object_category", "scene", "spatial_relation", "action", "event")
COUNT_TASKS = ("object_number", "dynamic_object_number")
CATEGORY_TASKS = ("camera_angle", "camera_movement", "style")
N_OPTIONS = 4  # counts and categories: the answer and three distractors (Fig. A5)

_PRESENCE = {
    "object_category": 'Does the object "{x}" appear in the {media}?',
    "scene": 'Does the scene "{x}" fit the {media}?',
    "spatial_relation": 'Is the following true of the {media}: "{x}"?',
    "action": 'Does the action "{x}" appear in the {media}?',
    "event": 'Does the event "{x}" happen in the {media}?',
}
_CATEGORY = {
    "camera_angle": "What is the camera angle of this {media}?",
    "camera_movement": "In which direction does the camera move in this {media}?",
    "style": "What is the style of this {media}?",
}
_OPEN = {
    "object_color": 'What is the color of the object "{x}" in the {media}?',
    "OCR": "What text appears in the {media}?",
    "character_identification": "Who is the person or character in the {media}?",
}
CHOICE_INSTRUCTION = "Answer with the letter of the correct option only."
OPEN_INSTRUCTION = "Answer with a short phrase."

QUESTIONS = pa.schema([
    pa.field("qa_id", pa.string(), nullable=False),  # content key of the question (version, item, text, options)
    pa.field("task", pa.string(), nullable=False),
    pa.field("item_id", pa.string(), nullable=False),
    pa.field("sub_index", pa.int32()),  # dynamic_object_number: the object's index in the annotation; else null
    pa.field("video_id", pa.string(), nullable=False),
    pa.field("media_path", pa.string()),
    pa.field("media_type", pa.string()),
    pa.field("kind", pa.string(), nullable=False),  # "choice" | "open"
    pa.field("question", pa.string(), nullable=False),
    pa.field("options", pa.list_(pa.string())),  # choice: option texts in letter order; open: null
    pa.field("answer", pa.string(), nullable=False),  # choice: the correct letter; open: the reference answer
    pa.field("answer_text", pa.string(), nullable=False),  # the correct option's text / the reference answer
    pa.field("prompt", pa.string(), nullable=False),  # the text the captioning model receives
])


@dataclass(frozen=True)
class Question:
    qa_id: str
    task: str
    item_id: str
    sub_index: int | None
    video_id: str
    media_path: str | None
    media_type: str | None
    kind: str
    question: str
    options: list[str] | None
    answer: str
    answer_text: str
    prompt: str

    def backend_fields(self) -> dict[str, str]:
        """What a backend that answers from structure reads (capeval.adapters.base.CaptionRequest.question)."""
        return {"id": self.qa_id, "task": self.task, "item_id": self.item_id,
                "sub_index": "" if self.sub_index is None else str(self.sub_index), "kind": self.kind,
                "question": self.question, "options": json.dumps(self.options or [], ensure_ascii=False)}


def render_prompt(question: str, options: list[str] | None) -> str:
    """The text sent to the captioning model: the question, the lettered options one per line, the instruction."""
    if not options:
        return f"{question}\n{OPEN_INSTRUCTION}"
    lines = [f"{LETTERS[i]}. {o}" for i, o in enumerate(options)]
    return "\n".join([question, *lines, CHOICE_INSTRUCTION])


def _rng(seed: int, task: str, item_id: str, sub_index) -> np.random.Generator:
    return np.random.default_rng(derived_seed("capability-qa", QA_VERSION, int(seed), task, item_id, sub_index))


def count_options(n: int, rng: np.random.Generator) -> list[str]:
    """`n` and three other positive counts near it (within max(3, n/2)), shuffled."""
    reach = max(3, -(-n // 2))
    pool = [k for k in range(max(1, n - reach), n + reach + 1) if k != n]
    picked = [int(k) for k in rng.choice(pool, size=N_OPTIONS - 1, replace=False)]
    options = [n, *picked]
    rng.shuffle(options)
    return [str(k) for k in options]


def category_options(answer: str, names: tuple[str, ...], rng: np.random.Generator) -> list[str]:
    """The annotated category and three others of the task, in the category list's order."""
    if answer not in names:
        raise ValueError(f"annotation {answer!r} is not one of the task's categories {list(names)}")
    others = [n for n in names if n != answer]
    k = min(N_OPTIONS - 1, len(others))
    chosen = {others[i] for i in rng.choice(len(others), size=k, replace=False)} | {answer}
    return [n for n in names if n in chosen]


def _annotation(item: dict):
    text = item["annotation"]
    try:
        return json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return text


def _one(item: dict, task: str, sub_index, media: str, categories: dict, rng) -> tuple[str, list | None, str, str]:
    """(question, options or None, answer, answer_text) of one annotation (one object of a count item)."""
    anno = _annotation(item)
    if task in PRESENCE_TASKS:
        return _PRESENCE[task].format(x=str(anno).strip(), media=media), list(YES_NO), "A", YES_NO[0]
    if task in COUNT_TASKS:
        name, n = list(anno.items())[sub_index or 0]
        options = count_options(int(n), rng)
        q = f'How many "{name}" are there in the {media}?'
        return q, options, LETTERS[options.index(str(int(n)))], str(int(n))
    if task in CATEGORY_TASKS:
        options = category_options(str(anno), categories[task], rng)
        return _CATEGORY[task].format(media=media), options, LETTERS[options.index(str(anno))], str(anno)
    if task == "object_color":
        (name, color), = anno.items()
        return _OPEN[task].format(x=name, media=media), None, str(color), str(color)
    if task in OPEN_TASKS:
        return _OPEN[task].format(media=media), None, str(anno), str(anno)
    raise ValueError(f"no CAPability-QA question for task {task!r} (tasks: {', '.join(TASKS)})")


def default_categories() -> dict[str, tuple[str, ...]]:
    """The category names of camera_angle / camera_movement / style, from capeval's own pack (the same names as
    the official lists)."""
    pack = pack_for("strict")
    return {t: categories(pack, t).names for t in CATEGORY_TASKS}


def build_questions(items: pa.Table, *, seed: int = 0, categories: dict | None = None) -> list[Question]:
    """CAPability-QA questions of ITEMS rows (capeval.engine.protocols.capability.release.load_items): one per item, one
    per annotated object for dynamic_object_number, in the items' order. Deterministic for a given seed."""
    categories = categories or default_categories()
    out = []
    for item in items.to_pylist():
        task = item["task"]
        media = "image" if item.get("media_type") == "image" else "video"
        subs = [None]
        if task == "dynamic_object_number":
            subs = list(range(len(_annotation(item))))
        for sub in subs:
            rng = _rng(seed, task, item["item_id"], sub)
            question, options, answer, answer_text = _one(item, task, sub, media, categories, rng)
            kind = "open" if options is None else "choice"
            qa_id = content_key("capability-qa", QA_VERSION, task, item["item_id"], sub, question, options, answer)
            out.append(Question(qa_id, task, item["item_id"], sub, item["video_id"], item.get("media_path"),
                                item.get("media_type"), kind, question, options, answer, answer_text,
                                render_prompt(question, options)))
    return out


def questions_table(questions: list[Question]) -> pa.Table:
    rows = [asdict(q) for q in questions]
    if not rows:
        return QUESTIONS.empty_table()
    return pa.Table.from_pylist(rows, schema=QUESTIONS)


def questions_from_table(table: pa.Table) -> list[Question]:
    return [Question(**{k: r[k] for k in QUESTIONS.names}) for r in table.to_pylist()]


# --- grading multiple choice -----------------------------------------------------------------------------------

_WRAP = " \t\r\n*_`'\"()[]{}<>.,:;!"
_PREFIXED = re.compile(r"^(?:the\s+)?(?:correct\s+)?(?:answer|option|choice)\s*(?:is)?\s*[:：]?\s*[\(\[]?([A-H])"
                       r"(?![\w'])", re.IGNORECASE)
_MARKED = re.compile(r"^[\(\[]?([A-H])[\)\].:：,]")
_STATED = re.compile(r"(?:answer|option|choice)\s*(?:is|:|：)\s*[\(\[\*]*([A-H])\b", re.IGNORECASE)


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text.lower().replace("’", "'")).strip(_WRAP)


def parse_choice(text: str | None, options: list[str]) -> tuple[str | None, str]:
    """The option letter a reply picks, and how it was read; (None, why) when it picks none or several.

    In this order: the reply is a letter of the options (wrapped in brackets, bold, a period: "A", "(B)", "**C.**");
    it starts with one marked as a letter ("B. No", "C) up", "(D)") or named as the answer ("Answer: D", "The answer
    is A"); it states one ("..., so the answer is B"); its text equals one option's text ("Can't tell", "dutch
    angle."); exactly one option's text occurs in it as whole words ("No, there is none" -> "No"). Letters count in
    upper case only, and a bare leading letter needs its mark: "A cat sits there" picks nothing by its "A".
    """
    if text is None or not text.strip():
        return None, "empty answer"
    letters = LETTERS[:len(options)]
    bare = text.strip().strip(_WRAP)
    if len(bare) == 1 and bare in letters:
        return bare, "letter"
    head = text.replace("*", "").strip()
    for pattern in (_MARKED, _PREFIXED):
        m = pattern.match(head)
        if m and m.group(1) in letters:  # upper case only: "answer: a" is too weak to read as option A
            return m.group(1), "leading letter"
    stated = {s.upper() for s in _STATED.findall(text) if s.upper() in letters and s.isupper()}
    if len(stated) == 1:
        return stated.pop(), "stated letter"
    norm = _norm(text)
    for letter, option in zip(letters, options):
        if norm == _norm(option):
            return letter, "option text"
    hits = [letter for letter, option in zip(letters, options)
            if re.search(rf"(?<![\w']){re.escape(_norm(option))}(?![\w'])", norm)]
    if len(hits) == 1:
        return hits[0], "option text inside"
    return None, ("names several options" if hits else "names no option") + f": {text.strip()[:80]!r}"


__all__ = ["QA_VERSION", "QUESTIONS", "Question", "build_questions", "questions_table", "questions_from_table",
           "parse_choice", "render_prompt", "OPEN_TASKS", "CHOICE_INSTRUCTION", "OPEN_INSTRUCTION"]
