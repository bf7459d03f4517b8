"""CapQuiz prompts, from a prompt pack (capeval.engine.packs): the judge answers a multiple-choice question from the
caption alone, with "Cannot be determined" as the last option.

Options are shown in the order given (the benchmark balances the position of the correct answer itself); the
protocol param `shuffle=True` shuffles them per item and judge seed, for position-robustness trials (a different
order per seed, the same on every machine and in every run). Params: `mode` ("strict": capeval's pack;
"official": the paper's judge prompt from the benchmark pack, no system message, no temperature sent), `prompts`
(a pack path), `shuffle`, `temperature`. The pack digest and the mode enter every request key. Strict mode fences
the caption, question and options as data (engine/replies/fences.py).

What the paper leaves open and capeval fixes (said here, not guessed silently): options render one per line as
"<letter>. <text>", the letters as "A, B, C, D, E, F"."""

from __future__ import annotations

import json
import random

from capeval.engine.keys import derived_seed
from capeval.engine import packs
from capeval.engine.replies.fences import fence
from capeval.engine.packs import PromptPack, resolve_pack
from capeval.engine.protocols.base import Rendered

LETTERS = ("A", "B", "C", "D", "E")
CANNOT_DETERMINE_LETTER = "F"
CANNOT_DETERMINE_TEXT = "Cannot be determined"
CHOICES = LETTERS + (CANNOT_DETERMINE_LETTER,)
ALPHABET = "ABCDEFGHIJ"
OFFICIAL, STRICT = "official", "strict"
UNSET = object()


def check_mode(mode: str | None) -> str:
    return packs.check_mode("capquiz", mode)


def pack_for(mode: str = STRICT, prompts: str | None = None) -> PromptPack:
    return resolve_pack("capquiz", prompts, mode=check_mode(mode), official_name="capquiz")


def as_bool(value) -> bool:
    if isinstance(value, str):
        if value.strip().lower() in ("1", "true", "yes", "on"):
            return True
        if value.strip().lower() in ("0", "false", "no", "off", ""):
            return False
        raise ValueError(f"capquiz: expected true/false, got {value!r}")
    return bool(value)


def shuffle_order(item_id: str, n: int = len(LETTERS), seed: int = 0) -> list[int]:
    """order[i] = index (in the item's given option list) of the option shown at letter i, for judge seed `seed`."""
    order = list(range(n))
    random.Random(derived_seed("capquiz", "option-shuffle", item_id, int(seed))).shuffle(order)
    return order


def correct_index(item: dict) -> int:
    """The correct option's index in the given list: `answer` is the option text or its letter."""
    options, answer = list(item.get("options") or []), item.get("answer")
    if answer in options:
        return options.index(answer)
    if isinstance(answer, str):
        stripped = answer.strip()
        folded = [o.strip().lower() for o in options]
        if stripped.lower() in folded:
            return folded.index(stripped.lower())
        if stripped.upper() in ALPHABET[: len(options)] and len(stripped) == 1:
            return ALPHABET.index(stripped.upper())
    raise ValueError(f"capquiz item {item.get('item_id')!r}: answer {answer!r} is neither one of its options "
                     f"{options} nor an option letter")


def option_block(shown: list[str]) -> tuple[str, str, tuple[str, ...]]:
    """(options text, option_id_str, letters) for the options as shown (the last one "Cannot be determined")."""
    letters = tuple(ALPHABET[: len(shown)])
    return "\n".join(f"{k}. {t}" for k, t in zip(letters, shown)), ", ".join(letters), letters


def render(item: dict, caption: dict, *, seed: int, mode: str = STRICT, prompts: str | None = None,
           shuffle=False, temperature=UNSET, pack: PromptPack | None = None, **_opts) -> list[Rendered]:
    """The request of one item and one caption. `pack`: the run's pack, when the caller resolved it (once for all
    its requests: `CapQuizProtocol.build_requests`); else the pack of `mode` and `prompts`."""
    mode = check_mode(mode)
    pack = pack or pack_for(mode, prompts)
    options = [str(o) for o in (item.get("options") or [])]
    if not 2 <= len(options) <= len(ALPHABET) - 1:
        raise ValueError(f"capquiz item {item['item_id']!r}: expected 2-{len(ALPHABET) - 1} options, got {len(options)}")
    order = shuffle_order(item["item_id"], len(options), seed) if as_bool(shuffle) else list(range(len(options)))
    shown = [options[i] for i in order] + [CANNOT_DETERMINE_TEXT]
    block, option_ids, letters = option_block(shown)
    correct = letters[order.index(correct_index(item))]
    question = item.get("annotation") or ""
    text = caption.get("text") or ""
    if mode == STRICT:  # caption, question and options fenced as data; official prompts are sent byte for byte
        system, user = pack.render(
            "judge/mcq", caption=fence("caption", text), question=fence("question", question),
            options=fence("options", block), option_id_str=option_ids)
    else:
        system, user = pack.render("judge/mcq", caption=text, question=question, options=block,
                                   option_id_str=option_ids)
    if temperature is UNSET:
        temp = None if mode == OFFICIAL else 0.0
    else:
        temp = None if temperature in (None, "none") else float(temperature)
    return [Rendered(
        task=item["task"], step="answer", system=system, user=user, choices=letters if mode == STRICT else None,
        max_tokens=8 if mode == STRICT else None, temperature=temp, send_seed=mode == STRICT,
        fields={"caption": text, "question": question, "options": json.dumps(shown)},
        parse={"correct": correct, "order": order, "shown": shown, "cannot": letters[-1], "mode": mode},
    )]
