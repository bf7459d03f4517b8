"""VC-Inspector's synthetic captions of controlled quality: the pure rules (no model, no I/O).

The paper (arXiv 2509.16538, §4.1) builds pseudo captions from a ground-truth caption X: an LLM lists its objects
O = {o_1..o_M} and actions A = {a_1..a_N}; K ~ Unif{0..M} objects and L ~ Unif{0..N} actions are drawn (a discrete
uniform over the integers, both ends included) and replaced by LLM-made alternatives, giving R, |R| = K + L, and

    score = 1 - |R| / (|O| + |A|)          (in [0, 1]; more replaced elements, lower score)

"then converted to an integer in the 1-5 range" -- the conversion is stated neither in the paper nor in the official
code (whose generator overwrites the score with an embedding similarity, see docs/construct.md). capeval's
conversion, `quality_label`, is

    label = 1 + floor(4 * score)           (exact, in integers: 1 + (4 * (n - k)) // n)

so 5 is kept for a caption with nothing replaced, and each lower label spans a quarter of the score range:
[0.75, 1) -> 4, [0.5, 0.75) -> 3, [0.25, 0.5) -> 2, [0, 0.25) -> 1. One wrong object among four or more elements
gives 4, which is what the official README's example answer shows ("4", one wrong object).

`n` = 0 (no object and no action found) has no score: 0/0 is undefined, and such a caption cannot be corrupted at
all; `quality_score` refuses it and the pipeline records the caption as skipped.
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from capeval.engine.metrics.alignment import match_case

MIN_LABEL, MAX_LABEL = 1, 5
#: the official generator's three variants (src/gen_data/augmentation.py): objects only, actions only, both;
#: the paper's §4.1 describes "obj_act"
VARIANTS = ("obj", "act", "obj_act")


def _check_counts(n_replaced: int, n_total: int) -> None:
    if isinstance(n_replaced, bool) or isinstance(n_total, bool) or int(n_replaced) != n_replaced \
            or int(n_total) != n_total:
        raise ValueError(f"counts must be integers, got k={n_replaced!r}, n={n_total!r}")
    if n_total <= 0:
        raise ValueError(f"no objects or actions (n={n_total}): the score 1 - k/n is undefined")
    if not 0 <= n_replaced <= n_total:
        raise ValueError(f"replaced elements must be between 0 and n={n_total}, got k={n_replaced}")


def quality_score(n_replaced: int, n_total: int) -> Fraction:
    """The paper's score, exactly: 1 - k/n for k of the caption's n objects and actions replaced."""
    _check_counts(n_replaced, n_total)
    return 1 - Fraction(int(n_replaced), int(n_total))


def quality_label(n_replaced: int, n_total: int) -> int:
    """The 1-5 label of k replaced out of n (module docstring): 1 + floor(4 * (1 - k/n)), in exact integers."""
    _check_counts(n_replaced, n_total)
    n, k = int(n_total), int(n_replaced)
    return MIN_LABEL + (4 * (n - k)) // n


def sample_rng(seed: int, *parts: object) -> np.random.Generator:
    """A generator fixed by (seed, parts): the same source caption and sample index draw the same replacements in
    every run (a rerun renders the same prompts, so the judgment cache answers them)."""
    text = "\x00".join(["vcinspector-augment", str(int(seed)), *map(str, parts)])
    return np.random.default_rng(int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little"))


@dataclass(frozen=True)
class Sample:
    """One pseudo caption's plan: which objects and actions to replace, in the order they are substituted
    (objects first, then actions, as the official generator does). Indices point into the extracted lists."""

    variant: str
    objects: tuple[int, ...] = ()
    actions: tuple[int, ...] = ()

    @property
    def n_replaced(self) -> int:
        return len(self.objects) + len(self.actions)


def _draw(n: int, rng: np.random.Generator) -> tuple[int, ...]:
    # The official generator shuffles the list and replaces its first K, K uniform over {0..n}.
    order = rng.permutation(n)
    k = int(rng.integers(0, n + 1))
    return tuple(int(i) for i in order[:k])


def draw_sample(n_objects: int, n_actions: int, variant: str, rng: np.random.Generator) -> Sample:
    """K ~ Unif{0..M} objects (variants obj, obj_act) and L ~ Unif{0..N} actions (act, obj_act), each a uniformly
    random subset of that size."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    objects = _draw(n_objects, rng) if variant in ("obj", "obj_act") else ()
    actions = _draw(n_actions, rng) if variant in ("act", "obj_act") else ()
    return Sample(variant, objects, actions)


def replace_literal(caption: str, old: str, new: str) -> str | None:
    """`caption` with every whole-word occurrence of `old` (case-insensitive) replaced by `new`, the first letter's
    case kept; None when `old` does not occur as a whole word (the substitution then needs the LLM)."""
    old = old.strip()
    if not old:
        return None
    # \b only works next to word characters: a phrase starting or ending with punctuation is bounded by lookarounds
    left = r"\b" if re.match(r"\w", old) else r"(?<!\S)"
    right = r"\b" if re.search(r"\w$", old) else r"(?!\S)"
    pattern = re.compile(left + re.escape(old) + right, re.IGNORECASE)
    if not pattern.search(caption):
        return None
    return pattern.sub(lambda m: match_case(m.group(0), new.strip()), caption)


def parse_list_literal(text: str | None) -> list[str]:
    """The official extraction reply: a Python list literal (the official code eval()s it; here
    ast.literal_eval, which reads the same literals and runs nothing). Elements are kept as text."""
    if text is None or not text.strip():
        raise ValueError("empty reply")
    try:
        value = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as exc:
        raise ValueError(f"not a Python list literal: {text.strip()[:80]!r} ({type(exc).__name__})") from None
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"expected a list, got {type(value).__name__}: {text.strip()[:80]!r}")
    return [str(v) for v in value]


def clean_elements(values: list) -> list[str]:
    """Strict mode's element list: texts stripped, empties dropped, case-insensitive duplicates dropped (a word
    counted twice would count twice in n)."""
    out, seen = [], set()
    for v in values:
        if not isinstance(v, str):
            continue
        v = " ".join(v.split())
        if v and v.lower() not in seen:
            seen.add(v.lower())
            out.append(v)
    return out


@dataclass(frozen=True)
class ExplanationTemplates:
    """Sentences for the explanation of a pseudo caption, by what was replaced: `none`, `objects`, `actions`,
    `both`; `{objects}` / `{actions}` are filled with the wrong (new) elements, joined by `joiner`."""

    none: str
    objects: str
    actions: str
    both: str
    joiner: str = ", "

    def explain(self, wrong_objects: list[str], wrong_actions: list[str]) -> str:
        objs = self.joiner.join(w.strip() for w in wrong_objects)
        acts = self.joiner.join(w.strip() for w in wrong_actions)
        if wrong_objects and wrong_actions:
            return self.both.format(objects=objs, actions=acts)
        if wrong_objects:
            return self.objects.format(objects=objs)
        if wrong_actions:
            return self.actions.format(actions=acts)
        return self.none


_PAREN_SLOT = re.compile(r"\(\s*\{(\w+)\}\s*\)")


def templates_from_finetune_prompt(text: str, none: str) -> ExplanationTemplates:
    """The paper's explanation sentence, read from its fine-tuning prompt (the official pack's `paper/A.6_finetune`,
    given at run time; its text is not part of capeval). The assistant turn after the score slot holds three
    alternatives separated by '/': wrong actions, wrong objects, wrong objects and actions, the first carrying the
    shared opening sentence. The paper gives no sentence for an unchanged caption: `none` is used. Spaces inside
    the slot's parentheses (a PDF extraction artefact: the official README's example writes "(guitar)") are
    dropped."""
    body = text.rsplit("{quality_score}", 1)[-1].strip() if "{quality_score}" in text else text.strip()
    body = _PAREN_SLOT.sub(lambda m: "({" + m.group(1) + "})", body)
    parts = [p.strip() for p in body.split("/")]
    if len(parts) != 3:
        raise ValueError(f"expected three alternatives separated by '/', got {len(parts)}: {body[:120]!r}")
    first, objs, both = parts
    # The first alternative is "<opening> <phrase>": its phrase has as many words before "(" as the second one's.
    n_words = len(objs[:objs.index("(")].split()) if "(" in objs else 0
    words = list(re.finditer(r"\S+", first[:first.index("(")])) if "(" in first else []
    if not n_words or len(words) <= n_words:
        raise ValueError(f"cannot tell the opening sentence from the first alternative: {first[:120]!r}")
    start = words[-n_words].start()
    opening, acts = first[:start], first[start:]

    def sentence(alt: str) -> str:
        return (opening + alt).rstrip(".") + "."

    def slots(alt: str) -> str:
        return alt.replace("{wrong_obj}", "{objects}").replace("{wrong_act}", "{actions}")

    return ExplanationTemplates(none=none, objects=sentence(slots(objs)), actions=sentence(slots(acts)),
                                both=sentence(slots(both)))


def finetune_target(label: int, explanation: str) -> str:
    """The assistant's answer in the layout VC-Inspector's official mode parses (parsing.parse_official): the
    integer on the first line, a blank line, the explanation."""
    if label not in range(MIN_LABEL, MAX_LABEL + 1):
        raise ValueError(f"label must be an integer 1-5, got {label!r}")
    return f"{label}\n\n{explanation.strip()}"


def chat_record(record_id: str, user: str, target: str, video: str | None) -> dict:
    """One fine-tuning example as a JSONL chat record (the messages/videos layout LLaMA-Factory and ms-swift read):
    the user turn (video tag + caption + instruction), the assistant turn (score + explanation), the video path."""
    rec = {"id": record_id, "messages": [{"role": "user", "content": user}, {"role": "assistant", "content": target}]}
    if video:
        rec["videos"] = [video]
    return rec
