"""VidCapBench prompts, rendered from a prompt pack (capeval.engine.packs): step "answer" (`judge/answer`: answer the
question from the caption alone), then step "score" (`judge/score`: grade that answer against the reference).

Protocol params: `mode` ("strict", capeval's own pack and JSON grading; or "official", the benchmark's pack read
from a path, sent as the official script sends it), `prompts` (a pack path), `temperature` (strict default 0;
official default None = no sampling parameter sent, as the official script sets none).

The pack's digest and the mode enter every request key (`revision_tags`), so two packs or modes never share
cached judgments. Strict mode fences every text it did not write (caption, question, reference answer and the
answer step's reply) as data (engine/replies/fences.py). Official mode sends one user message per call, no JSON schema, no temperature, and the same
content for every judge seed (the official script has no seed)."""

from __future__ import annotations

import json

from capeval.engine import packs
from capeval.engine.keys import mode_tag, pack_tag
from capeval.engine.replies.fences import fence
from capeval.engine.packs import PromptPack, resolve_pack
from capeval.engine.protocols.base import Rendered

OFFICIAL, STRICT = "official", "strict"
#: Replies to the grading prompt are free text in official mode; leave room for the analysis.
#: official: None = no max_tokens sent, as eval.py sends none (nor a seed: `send_seed` below)
ANSWER_MAX_TOKENS = {STRICT: 128, OFFICIAL: None}
SCORE_MAX_TOKENS = {STRICT: 256, OFFICIAL: None}
SCORE_SCHEMA = json.dumps({
    "type": "object",
    "properties": {"analysis": {"type": "string", "maxLength": 400}, "score": {"type": "integer", "enum": [2, 1, 0, -1]}},
    "required": ["analysis", "score"],
})
UNSET = object()  # "param not given" (None is a value: no temperature sent)


def check_mode(mode: str | None) -> str:
    return packs.check_mode("vidcapbench", mode)


def pack_for(mode: str = STRICT, prompts: str | None = None) -> PromptPack:
    return resolve_pack("vidcapbench", prompts, mode=check_mode(mode), official_name="vidcapbench")


def temperature_for(mode: str, temperature=UNSET) -> float | None:
    """The sampling temperature sent: the `temperature` param when given, else 0 (strict) / none (official)."""
    if temperature is UNSET:
        return None if check_mode(mode) == OFFICIAL else 0.0
    return None if temperature is None or temperature == "none" else float(temperature)


def revision_tags(pack: PromptPack, mode: str) -> tuple[str, str]:
    return pack_tag(pack.digest), mode_tag(check_mode(mode))


def _settings(mode, prompts, temperature) -> dict:
    """What the score step needs to render with the same pack and sampling (kept in the request context)."""
    return {"mode": mode, "prompts": None if prompts is None else str(prompts), "temperature": temperature}


def render(item: dict, caption: dict, *, seed: int, mode: str = STRICT, prompts: str | None = None,
           temperature=UNSET, **_opts) -> list[Rendered]:
    # no seed-dependent content: repeated seeds differ by the seed sent to the backend (strict) or, where none is
    # sent (official), by their cache keys only -- separate draws either way
    del seed
    mode = check_mode(mode)
    pack = pack_for(mode, prompts)
    temp = temperature_for(mode, temperature)
    question = item.get("annotation") or ""
    text = caption.get("text") or ""
    if mode == STRICT:  # caption and question fenced as data; official prompts are sent byte for byte
        system, user = pack.render("judge/answer", caption=fence("caption", text), question=fence("question", question))
    else:
        system, user = pack.render("judge/answer", caption=text, question=question)
    return [Rendered(task=item["task"], step="answer", system=system, user=user, max_tokens=ANSWER_MAX_TOKENS[mode],
                     temperature=temp, send_seed=mode == STRICT, fields={"caption": text, "question": question},
                     parse={"question": question, "reference": item.get("answer") or "",
                            "settings": _settings(mode, prompts, temp)})]


def render_score(task: str, question: str, reference: str, answer: str, settings: dict | None = None) -> Rendered:
    settings = settings or {"mode": STRICT, "prompts": None, "temperature": 0.0}
    mode = check_mode(settings.get("mode"))
    pack = pack_for(mode, settings.get("prompts"))
    if mode == STRICT:  # the prediction is the judge's earlier reply, built from the caption: fenced like it
        system, user = pack.render("judge/score", question=fence("question", question),
                                   answer=fence("reference", reference), prediction=fence("prediction", answer))
    else:
        system, user = pack.render("judge/score", question=question, answer=reference, prediction=answer)
    return Rendered(task=task, step="score", system=system, user=user,
                    json_schema=SCORE_SCHEMA if mode == STRICT else None, max_tokens=SCORE_MAX_TOKENS[mode],
                    temperature=settings.get("temperature"), send_seed=mode == STRICT,
                    fields={"question": question, "reference": reference, "answer": answer},
                    parse={"answer": answer, "settings": settings})
