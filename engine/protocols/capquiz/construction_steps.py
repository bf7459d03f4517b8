"""The generation steps of the CapQuiz construction pipeline (construction.py): each renders its asks
from a pack prompt and parses the model's reply into a payload, or fails with the reason (recorded; re-asked in
strict mode). Which prompt each step reads, in which mode, is said in docs/construct.md.

What the paper leaves open and capeval fixes here: the dense description (when a video has one) is appended below
the official generation and taxonomy prompts, which have no slot for it (they expect frames); the dedup prompt's
input list is appended below it as JSON, as the pack's `inputs` note says."""

from __future__ import annotations

import json
from typing import Any

from capeval.engine.construct.base import Ask, GenerationStep, ParseFailure
from capeval.engine.replies.fences import fence
from capeval.engine.replies.repair import ParseError, extract_json, match_choice
from capeval.engine.protocols.capquiz.types import normalize_type

OTHERS = "Others"


def _json(text: str, kind: type) -> Any:
    try:
        return extract_json(text, kind)[0]
    except ParseError as exc:
        raise ParseFailure(str(exc)) from None


class TaxonomyStep(GenerationStep):
    """The video's domain: the official prompt's JSON {sub-category: probability} (top one kept), or one name."""

    name, protocol, version = "taxonomy", "capquiz", "1"

    def __init__(self, domains: list[dict]):
        self.domains = {normalize_type(d["name"]): d for d in domains}

    def ask(self, video: dict, *, official: bool, frames: dict | None = None) -> Ask:
        names = tuple(d["name"] for d in self.domains.values()) + (OTHERS,)
        listing = "\n".join(f"{d['name']} ({d['super']}): {d['definition']}" for d in self.domains.values())
        desc = video.get("description") or ""
        ask = Ask(item_id=video["video_id"], video_id=video["video_id"], prompt_id="construct/video_taxonomy",
                  fields={"description": fence("description", desc), "domains": listing}, max_tokens=128,
                  choices=None if official else names, temperature=None if official else 0.0,
                  appendix=f"Video description:\n{desc}" if official and desc else None,
                  backend_fields={"caption": desc, "question": "Which domain is the video from?",
                                  "options": json.dumps(list(names))})
        return _with_frames(ask, frames)

    def parse(self, context: dict, text: str) -> dict:
        scores: dict[str, float] = {}
        try:
            value = extract_json(text, dict)[0]
            for k, v in value.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    scores[str(k)] = float(v)
        except ParseError:
            scores = {text.strip().strip("\"'`*. "): 1.0}
        known = {}
        for name, p in scores.items():
            d = self.domains.get(normalize_type(name))
            if d is not None:
                known[d["name"]] = p
            elif normalize_type(name) == normalize_type(OTHERS):
                known[OTHERS] = p
        if not known:
            raise ParseFailure(f"names no known sub-category: {text[:80]!r}")
        top = max(known, key=lambda k: (known[k], k != OTHERS))
        return {"domain": top, "super": self.domains[normalize_type(top)]["super"] if top != OTHERS else None,
                "scores": known}


class GenerateStep(GenerationStep):
    """Candidate QA pairs for one video: a JSON array of {category, question, options, answer} (or, under a JSON
    schema, an object whose "questions" is that array). Entries that break the format (option count, duplicate
    options, an answer not among them) are kept out one by one, with why; a reply with no usable entry fails as a
    whole. Strict mode constrains the reply with `schema()` on backends that have structured output (at most `cap`
    questions); official mode sends the paper's prompt as it is, unconstrained."""

    name, protocol, version = "generate", "capquiz", "1"

    def __init__(self, types: list[dict], n_options: int = 5, per_type: int = 2, max_tokens: int = 4096,
                 cap: int | None = None):
        self.types, self.n_options, self.per_type, self.max_tokens = types, n_options, per_type, max_tokens
        self.cap = cap

    def schema(self) -> str:
        """The strict reply's JSON schema: an object (the root every structured-output API takes) holding the
        questions, each with a type name from the list, exactly n_options options and the answer."""
        entry = {"type": "object", "properties": {
            "category": {"type": "string", "enum": [t["name"] for t in self.types]},
            "question": {"type": "string"},
            "options": {"type": "array", "items": {"type": "string"}, "minItems": self.n_options,
                        "maxItems": self.n_options},
            "answer": {"type": "string"}}, "required": ["category", "question", "options", "answer"]}
        questions = {"type": "array", "items": entry, "minItems": 1}
        if self.cap:
            questions["maxItems"] = self.cap
        return json.dumps({"type": "object", "properties": {"questions": questions}, "required": ["questions"]})

    def ask(self, video: dict, *, official: bool, frames: dict | None = None) -> Ask:
        desc = video.get("description") or ""
        listing = "\n".join(f"{t['name']}: {t['definition']}" for t in self.types)
        ask = Ask(item_id=video["video_id"], video_id=video["video_id"], prompt_id="construct/qa_generation",
                  fields={"description": fence("description", desc), "types": listing, "per_type": self.per_type,
                          "n_options": self.n_options},
                  appendix=f"Video description:\n{desc}" if official and desc else None,
                  max_tokens=self.max_tokens, temperature=None if official else 0.0,
                  json_schema=None if official else self.schema(),
                  backend_fields={"caption": desc}, context={"n_options": self.n_options})
        return _with_frames(ask, frames)

    def parse(self, context: dict, text: str) -> dict:
        entries = _questions(text)
        n = int(context.get("n_options") or self.n_options)
        good, bad = [], []
        for i, e in enumerate(entries):
            why = _entry_problem(e, n)
            if why:
                bad.append({"index": i, "why": why, "entry": e})
            else:
                options = [str(o).strip() for o in e["options"]]
                good.append({"index": i, "category": str(e.get("category") or "").strip(),
                             "question": str(e["question"]).strip(), "options": options,
                             "answer": options[[o.lower() for o in options].index(str(e["answer"]).strip().lower())]})
        if not good:
            raise ParseFailure(f"no usable question among {len(entries)} entries"
                               + (f" (first problem: {bad[0]['why']})" if bad else ""))
        return {"questions": good, "rejected": bad}


def _questions(text: str) -> list:
    """The generated entries: the reply's JSON array, or the "questions" array of the object a schema asked for."""
    try:
        whole = json.loads(text)
    except (ValueError, RecursionError, TypeError):
        whole = None
    if isinstance(whole, dict) and isinstance(whole.get("questions"), list):
        return whole["questions"]
    return _json(text, list)


def _entry_problem(e: Any, n: int) -> str | None:
    if not isinstance(e, dict):
        return f"not an object: {type(e).__name__}"
    if not isinstance(e.get("question"), str) or not e["question"].strip():
        return "no question text"
    options = e.get("options")
    if not isinstance(options, list) or len(options) != n:
        return f"expected {n} options, got {len(options) if isinstance(options, list) else type(options).__name__}"
    folded = [str(o).strip().lower() for o in options]
    if any(not o for o in folded) or len(set(folded)) != n:
        return "options empty or repeated"
    if str(e.get("answer", "")).strip().lower() not in folded:
        return f"answer {e.get('answer')!r} is not one of the options"
    return None


class ClassifyStep(GenerationStep):
    """The question's type, one of the ten (capeval's own prompt: the paper has the generator label it)."""

    name, protocol, version = "classify", "capquiz", "1"

    def __init__(self, types: list[dict], pack=None):
        self.types, self.pack = types, pack
        self.names = tuple(t["name"] for t in types)

    def ask(self, cand: dict) -> Ask:
        listing = "\n".join(f"{t['name']}: {t['definition']}" for t in self.types)
        text = f"{cand['question']}\n(correct answer: {cand['answer']})"
        return Ask(item_id=cand["item_id"], video_id=cand["video_id"], prompt_id="construct/classify",
                   fields={"question": fence("question", text), "types": listing}, choices=self.names,
                   max_tokens=16, backend_fields={"caption": cand["question"], "question": cand["question"],
                                                  "options": json.dumps(list(self.names))})

    def parse(self, context: dict, text: str) -> dict:
        try:
            return {"type": match_choice(text, self.names)[0]}
        except ParseError:
            by_norm = {normalize_type(n): n for n in self.names}
            name = by_norm.get(normalize_type(text.strip().strip("\"'`*. ")))
            if name is None:
                raise ParseFailure(f"not one of the {len(self.names)} question types: {text[:60]!r}") from None
            return {"type": name}


class DedupStep(GenerationStep):
    """Groups of repeated questions within one video. The paper's prompt answers question groups of answer groups
    (List[List[List[int]]]); an innermost list (same question intent AND same answer) is a cluster of duplicates.
    capeval's own prompt answers the clusters directly (List[List[int]]). Either must name every index once."""

    name, protocol, version = "dedup", "capquiz", "1"

    def ask(self, video_id: str, cands: list[dict], *, official: bool) -> Ask:
        listing = json.dumps([{"index": i, "question": c["question"], "answer": c["answer"]}
                              for i, c in enumerate(cands)], ensure_ascii=False, indent=1)
        return Ask(item_id=video_id, video_id=video_id, prompt_id="construct/dedup",
                   fields={"items": fence("questions", listing)}, appendix=listing if official else None,
                   max_tokens=64 + 16 * len(cands), temperature=None if official else 0.0,
                   context={"n": len(cands)})

    def parse(self, context: dict, text: str) -> dict:
        value = _json(text, list)
        n = int(context["n"])
        clusters = []
        for group in value:
            if isinstance(group, list) and group and all(isinstance(g, list) for g in group):
                clusters.extend(group)  # question group -> its answer groups
            else:
                clusters.append(group)
        seen: list[int] = []
        for c in clusters:
            if not isinstance(c, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in c):
                raise ParseFailure(f"a group is not a list of indices: {c!r}"[:120])
            seen.extend(c)
        if sorted(seen) != list(range(n)):
            raise ParseFailure(f"the groups must name each index 0..{n - 1} exactly once; they name {sorted(seen)}"
                               [:160])
        return {"clusters": [list(c) for c in clusters if c]}


def _with_frames(ask: Ask, frames: dict | None) -> Ask:
    """Show the video's decoded frames (FRAMES row) to a multimodal model, as the paper generates from the video."""
    if frames:
        ask.frames_path, ask.images_digest = frames["path"], frames["frames_key"]
    return ask
