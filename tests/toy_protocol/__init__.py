"""A toy protocol defined entirely in the test folder: "does the caption mention the item's word?" -> yes/no.

It exists to prove the protocol interface (engine/protocols/base.py, docs/architecture.md): a protocol is one package
that declares itself -- its pack, request rendering, parsing, metrics, headline and paired statistic, and what it
brings beyond judging (extras.py: a CLI command, a report section, the local judge's answers) -- and capeval's
sweep, compare, score, report and local judge run it without any engine file naming it. It registers through the
`capeval.protocols` entry point group (tests/pipeline/test_toy_protocol.py installs a dist-info folder naming this
package), exactly as a protocol shipped in another distribution would. It brings its own construction pipeline too
(`capeval construct toy`, construction.py), found through the `construction` hook.

Items: any dataset; the word asked about is the item's `answer` (else its `task`). The judge answers "yes" or "no"
(a choice constraint); anything else is a parse failure, never a guess.
"""

from __future__ import annotations

from enum import IntEnum
from pathlib import Path

from capeval.engine.packs import load_pack
from capeval.engine.protocols.base import JudgeProtocol, Rendered
from capeval.engine.registry import register
from capeval.engine.schemas import NO_VERDICT, ParseStatus

from . import extras

PACK = Path(__file__).resolve().parent / "pack.toml"


class MentionVerdict(IntEnum):
    NO = 0
    YES = 1


N_CODES = len(MentionVerdict)


class MentionProtocol(JudgeProtocol):
    name = "toy_mention"
    version = "1"
    codes = (MentionVerdict,)
    headline = ("mention_rate",)

    def render(self, item, caption, *, seed, prompts=None, **opts):
        pack = load_pack(prompts or PACK)
        word = item.get("answer") or item.get("task") or ""
        system, user = pack.render("judge/mention", caption=caption.get("text") or "", word=word)
        return [Rendered(task=item["task"], step="mention", system=system, user=user, choices=("yes", "no"),
                         max_tokens=4, fields={"word": word, "caption": caption.get("text") or ""})]

    def build_requests(self, items, captions, *, judge, judge_revision, seeds=(0,), prompts=None, **opts):
        pack = load_pack(prompts or PACK)  # the pack's content enters every request key
        return super().build_requests(items, captions, judge=judge, judge_revision=f"{judge_revision}|{pack.digest}",
                                      seeds=seeds, prompts=prompts, **opts)

    def parse(self, request, text):
        answer = (text or "").strip().lower().rstrip(".")
        if answer == "yes":
            return int(MentionVerdict.YES), ParseStatus.OK, None
        if answer == "no":
            return int(MentionVerdict.NO), ParseStatus.OK, None
        return NO_VERDICT, ParseStatus.FAILED, f"expected yes or no, got {answer[:40]!r}"

    # what it brings beyond judging (extras.py): `capeval toy rate`, a report section, the local judge's answers
    def cli_commands(self, subparsers, tools):
        extras.register_commands(subparsers, tools)

    def report_sections(self, run_path):
        return extras.report_sections(run_path)

    def stand_in_answer(self, request):
        return extras.stand_in(request)

    def packs_used(self, mode, params):
        return {"prompts": load_pack(params.get("prompts") or PACK)}

    def paired_spec(self, mode):
        from capeval.engine.metrics.paired import PairedSpec, code_stats

        from .metrics import mention_rate

        return PairedSpec(code_stats(N_CODES), N_CODES + 1, {"mention_rate": mention_rate})

    @property
    def construction(self):
        from .construction import PIPELINE  # deferred: a benchmark extension (it runs the judging path)

        return PIPELINE


PROTOCOL = register("protocol", "toy_mention")(MentionProtocol())
