"""CapQuiz question filtering (the paper's construction step, Fig. 7): the blind-solvability check, then semantic
de-duplication. Used by `capeval capquiz filter`.

Blind solvability: each judge answers every question WITHOUT the video or a caption, in `trials` trials with the
options shuffled differently per trial (seeded by item and trial, so a rerun asks the same requests and the
judgment cache answers them). A question is blindly solvable -- and removed -- when EVERY judge picks the right
option in at least `min_correct` of its trials (the paper: two judges, 3 trials, >= 2 of 3). A trial whose reply
does not parse counts as not right.

De-duplication (among the questions kept so far, within each video): two questions are duplicates when both the
question texts and the correct answers are semantically close (cosine similarity of sentence embeddings >= the
thresholds; `capeval capquiz filter` embeds with all-MiniLM-L6-v2; the paper uses an LLM for this clustering).
Duplicates form clusters (transitively), and each cluster keeps its hardest question (lowest blind accuracy over all
judges and trials; the first in file order on ties), as the paper keeps the most challenging one. The caller hands
`decide` the embedding function: a protocol reaches no backend itself.

Every item gets a record row saying whether it was kept and why.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pyarrow as pa

from capeval.engine.keys import derived_seed, pack_tag, protocol_tag, tagged_revision
from capeval.engine.protocols.base import JudgeProtocol, Rendered, RequestContext, make_row, rows_to_table
from capeval.engine.schemas import NO_VERDICT, ParseStatus

from .codes import CapQuizVerdict
from .parsing import pick_letter
from .prompts import ALPHABET, correct_index, pack_for

#: Sentence embeddings: texts -> a float array (len(texts), dim) of unit-norm rows (dot product = cosine similarity).
Embedder = Callable[[list[str]], np.ndarray]

RECORD = pa.schema([
    pa.field("item_id", pa.string()), pa.field("video_id", pa.string()), pa.field("task", pa.string()),
    pa.field("kept", pa.bool_()), pa.field("reason", pa.string()),
    pa.field("blind_right", pa.string()),  # JSON {judge: trials answered right}
    pa.field("blind_trials", pa.int32()), pa.field("blind_accuracy", pa.float64()),
    pa.field("blindly_solvable", pa.bool_()), pa.field("duplicate_of", pa.string()),
    pa.field("question_similarity", pa.float64()), pa.field("answer_similarity", pa.float64()),
])


class BlindProtocol(JudgeProtocol):
    """The blind-solvability question: no caption, options shuffled per trial (not registered: used by the filter)."""

    name = "capquiz-blind"
    version = "1"
    codes = (CapQuizVerdict,)

    def __init__(self, prompts: str | None = None, temperature: float | None = None):
        self.pack = pack_for("strict", prompts)
        self.temperature = temperature

    def requests(self, items: pa.Table, *, judge: str, judge_revision: str, trials: int) -> pa.Table:
        revision = tagged_revision(judge_revision, protocol_tag(self.name, self.version), pack_tag(self.pack.digest))
        rows = []
        for item in items.to_pylist():
            options = [str(o) for o in (item.get("options") or [])]
            if not 2 <= len(options) <= len(ALPHABET):
                raise ValueError(f"capquiz item {item['item_id']!r}: expected 2-{len(ALPHABET)} options, "
                                 f"got {len(options)}")
            right = correct_index(item)
            for trial in range(trials):
                order = list(range(len(options)))
                random.Random(derived_seed("capquiz", "blind-shuffle", item["item_id"], trial)).shuffle(order)
                shown = [options[i] for i in order]
                letters = tuple(ALPHABET[: len(shown)])
                block = "\n".join(f"{k}. {t}" for k, t in zip(letters, shown))
                question = item.get("annotation") or ""
                system, user = self.pack.render("construct/blind_solvability", question=question, options=block)
                # `fields` serve structured backends; the local judge reads the question where a caption would be
                # (it has nothing else to go on), so it picks the option closest to the question's own words.
                r = Rendered(task=item["task"], step="blind", system=system, user=user, choices=letters,
                             max_tokens=8, temperature=self.temperature,
                             fields={"caption": question, "question": question, "options": json.dumps(shown)},
                             parse={"correct": letters[order.index(right)], "shown": shown, "order": order})
                base = {"item_id": item["item_id"], "video_id": item["video_id"], "caption_key": None,
                        "captioner": None, "prompt_id": None, "frame_spec": None}
                # protocol "capquiz" in the rows: backends route "capquiz/<task>/blind" to their CapQuiz answerer
                rows.append(make_row(r, base, protocol="capquiz", judge=judge, judge_revision=revision, seed=trial,
                                     trial=trial))
        return rows_to_table(rows)

    def parse(self, request, text):
        ctx = RequestContext.decode(request.get("context")).parse
        shown = ctx.get("shown") or []
        try:
            letter, status = pick_letter(text, shown, tuple(ALPHABET[: len(shown)]))
        except Exception as exc:  # ParseError: not one of the letters
            return NO_VERDICT, ParseStatus.FAILED, str(exc)
        code = CapQuizVerdict.CORRECT if letter == ctx.get("correct") else CapQuizVerdict.WRONG
        return int(code), status, json.dumps({"letter": letter})


@dataclass
class FilterSettings:
    trials: int = 3
    min_correct: int = 2
    dedup: bool = True
    question_threshold: float = 0.85
    answer_threshold: float = 0.85


def blind_counts(verdicts: pa.Table) -> dict[str, int]:
    """item_id -> number of trials answered right, from one judge's blind verdicts."""
    out: dict[str, int] = {}
    for r in verdicts.select(["item_id", "verdict"]).to_pylist():
        out[r["item_id"]] = out.get(r["item_id"], 0) + int(r["verdict"] == int(CapQuizVerdict.CORRECT))
    return out


def decide(items: pa.Table, right: dict[str, dict[str, int]], settings: FilterSettings,
           embed: Embedder | None = None) -> pa.Table:
    """The record table: blind verdict per item, then de-duplication among the survivors (see the module doc).
    `embed` is needed when settings.dedup is on; it is called only when some question survives the blind check."""
    if settings.dedup and embed is None:
        raise ValueError("de-duplication needs an embedding function (embed=...)")
    rows = []
    for item in items.to_pylist():
        per_judge = {j: counts.get(item["item_id"], 0) for j, counts in right.items()}
        solvable = bool(per_judge) and all(n >= settings.min_correct for n in per_judge.values())
        n_trials = settings.trials * len(per_judge)
        rows.append({
            "item_id": item["item_id"], "video_id": item["video_id"], "task": item["task"], "kept": not solvable,
            "reason": (f"blindly solvable: every judge right in >= {settings.min_correct} of {settings.trials} "
                       f"trials without the video ({per_judge})") if solvable else "kept",
            "blind_right": json.dumps(per_judge, sort_keys=True), "blind_trials": n_trials,
            "blind_accuracy": sum(per_judge.values()) / n_trials if n_trials else None,
            "blindly_solvable": solvable, "duplicate_of": None, "question_similarity": None,
            "answer_similarity": None})
    if settings.dedup:
        _dedup(items.to_pylist(), rows, settings, embed)
    return pa.Table.from_pylist(rows, schema=RECORD)


def _dedup(items: list[dict], rows: list[dict], settings: FilterSettings, embed: Embedder) -> None:
    alive = [i for i, r in enumerate(rows) if r["kept"]]
    if not alive:  # nothing to compare: the embedding model is not even loaded
        return
    questions = embed([items[i].get("annotation") or "" for i in alive])
    answers = embed([str(items[i]["options"][correct_index(items[i])]) for i in alive])
    pos = {i: k for k, i in enumerate(alive)}
    parent = {i: i for i in alive}

    def root(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    by_video: dict[str, list[int]] = {}
    for i in alive:
        by_video.setdefault(items[i]["video_id"], []).append(i)
    for members in by_video.values():
        for a_i, a in enumerate(members):
            for b in members[a_i + 1:]:
                qs = float(questions[pos[a]] @ questions[pos[b]])
                as_ = float(answers[pos[a]] @ answers[pos[b]])
                if qs >= settings.question_threshold and as_ >= settings.answer_threshold:
                    parent[root(b)] = root(a)
    clusters: dict[int, list[int]] = {}
    for i in alive:
        clusters.setdefault(root(i), []).append(i)
    for members in clusters.values():
        if len(members) < 2:
            continue
        keep = min(members, key=lambda i: (rows[i]["blind_accuracy"] if rows[i]["blind_accuracy"] is not None
                                           else 0.0, i))
        for i in members:
            if i == keep:
                continue
            qs = float(questions[pos[i]] @ questions[pos[keep]])
            as_ = float(answers[pos[i]] @ answers[pos[keep]])
            rows[i].update(kept=False, duplicate_of=items[keep]["item_id"], question_similarity=qs,
                           answer_similarity=as_,
                           reason=f"duplicate of {items[keep]['item_id']!r} (question similarity {qs:.3f}, answer "
                                  f"similarity {as_:.3f}; the cluster keeps its hardest question)")
