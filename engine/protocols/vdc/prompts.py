"""VDC prompts, rendered from a prompt pack (capeval.engine.packs): step "answer" (`judge/answer`: answer one question
from the caption alone), then step "score" (`judge/score`: judge that answer against the reference, yes/no and 0-5).

Protocol params: `mode` ("strict": capeval's own pack, fenced data and a JSON reply; "official": the benchmark's
pack read from a path, sent as AuroraCap's `post_eval/process_vdc_result.py` sends it), `prompts` (a pack path),
`temperature` (strict default 0; official default 1.0, SGLang's default that the official script runs under, and it
is SENT: a server's own default may differ). The official script also samples with top_p 1.0 (SGLang's default); a
request carries no top_p, so a vLLM server applies the model's generation_config top_p unless it is started with
`--generation-config vllm`.

Official mode: system = the pack's role_system, user = its `user.format(...)` with the raw caption, question,
reference and answer-step reply (no stripping, no fencing), max_tokens 256 as the script's `gen(max_tokens=256)`,
no seed sent (the script has none). The pack's digest and the mode enter every request key (`revision_tags`)."""

from __future__ import annotations

import json

from capeval.engine import packs
from capeval.engine.keys import mode_tag, pack_tag
from capeval.engine.packs import PromptPack, resolve_pack
from capeval.engine.protocols.base import Rendered
from capeval.engine.replies.fences import fence

from .kinds import judged_kinds

OFFICIAL, STRICT = "official", "strict"
#: the official script's gen(max_tokens=256) for both calls; strict replies are a phrase and a small JSON object
ANSWER_MAX_TOKENS = {STRICT: 128, OFFICIAL: 256}
SCORE_MAX_TOKENS = {STRICT: 128, OFFICIAL: 256}
#: SGLang's default temperature, which the official script's `.run()` without sampling arguments gets
OFFICIAL_TEMPERATURE = 1.0
SCORE_SCHEMA = json.dumps({
    "type": "object",
    "properties": {"pred": {"type": "string", "enum": ["yes", "no"]},
                   "score": {"type": "integer", "minimum": 0, "maximum": 5}},
    "required": ["pred", "score"],
})
UNSET = object()  # "param not given" (None is a value: no temperature sent)


def check_mode(mode: str | None) -> str:
    return packs.check_mode("vdc", mode)


def pack_for(mode: str = STRICT, prompts: str | None = None) -> PromptPack:
    return resolve_pack("vdc", prompts, mode=check_mode(mode), official_name="vdc")


def temperature_for(mode: str, temperature=UNSET) -> float | None:
    """The sampling temperature sent: the `temperature` param when given, else 0 (strict) / 1.0 (official)."""
    if temperature is UNSET:
        return OFFICIAL_TEMPERATURE if check_mode(mode) == OFFICIAL else 0.0
    return None if temperature is None or temperature == "none" else float(temperature)


def revision_tags(pack: PromptPack, mode: str) -> tuple[str, str]:
    return pack_tag(pack.digest), mode_tag(check_mode(mode))


def settings(mode: str, prompts, temperature) -> dict:
    """What the score step needs to render with the same pack and sampling (kept in the request context)."""
    return {"mode": mode, "prompts": None if prompts is None else str(prompts), "temperature": temperature}


def render(item: dict, caption: dict, *, seed: int, mode: str = STRICT, prompts: str | None = None,
           temperature=UNSET, **_opts) -> list[Rendered]:
    """The answer-step request of one QA item and one caption; none when the caption's prompt names other kinds
    than the item's (kinds.judged_kinds). No seed-dependent content: repeated judge seeds differ by the seed sent
    (strict) or by their keys only (official)."""
    del seed
    if item.get("task") not in judged_kinds(caption.get("prompt_id")):
        return []
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
                            "settings": settings(mode, prompts, temp)})]


def render_score(task: str, question: str, reference: str, answer: str, settings: dict | None = None) -> Rendered:
    """The score-step request judging `answer` (the answer step's reply) against `reference`."""
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
