"""What the toy protocol brings beyond judging, through the hooks of capeval.engine.protocols.base.JudgeProtocol:

* `capeval toy rate --verdicts FILE` (cli_commands): the mention rate per prompt of a verdict table;
* a "Toy mentions" section in the HTML report of a run that judged with it (report_sections);
* the local judge's stand-in answer (stand_in_answer): "yes" when the caption shares a word with the word asked about
  or has a sentence close to it in meaning, else "no".
"""

from __future__ import annotations

import html
from pathlib import Path

import polars as pl

from capeval.engine.errors import UsageError
from capeval.engine.inputs import read_verdicts
from capeval.engine.protocols.base import CommandTools, ReportSection
from capeval.engine.stand_in import StandIn, StandInRequest, TextSimilarity, overlap, sentences

NAME = "toy_mention"
CLOSE = 0.5  # sentence similarity from which a caption counts as mentioning the word


def register_commands(subparsers, tools: CommandTools) -> None:
    toy = subparsers.add_parser("toy", help="the toy protocol's tools (rate)")
    sub = toy.add_subparsers(dest="toy_command", metavar="SUBCOMMAND")
    rate = sub.add_parser("rate", help="mention rate per prompt of a verdict table")
    rate.add_argument("--verdicts", required=True, type=Path, help="verdicts (Parquet, JSONL or CSV)")
    rate.set_defaults(func=run_rate)
    toy.set_defaults(func=lambda args: (toy.print_help(), 2)[1])


def run_rate(args) -> int:
    if not args.verdicts.is_file():
        raise UsageError(f"--verdicts {args.verdicts}: not found")
    verdicts = read_verdicts(args.verdicts)
    for (prompt,), rows in verdicts.group_by(["prompt_id"], maintain_order=True):
        yes = int((rows["verdict"] == 1).sum())
        print(f"{prompt}: {100.0 * yes / rows.height:.1f}% ({yes} of {rows.height})")
    return 0


def report_sections(run_path: Path) -> list[ReportSection]:
    results = Path(run_path) / "results.parquet"
    if not results.is_file():
        return []
    rows = pl.read_parquet(results).filter((pl.col("protocol") == NAME) & (pl.col("metric") == "mention_rate"))
    if rows.height == 0:
        return []
    body = "".join(f"<tr><td>{html.escape(str(r['prompt_id']))}</td><td class='num'>{r['value']:.1f}</td></tr>"
                   for r in rows.iter_rows(named=True))
    return [ReportSection(anchor="toy-mentions", title="Toy mentions",
                          html=f"<table class='toy'><thead><tr><th>prompt</th><th>mention rate</th></tr></thead>"
                               f"<tbody>{body}</tbody></table>")]


def stand_in(request: StandInRequest) -> StandIn:
    word, caption = request.fields.get("word", ""), request.fields.get("caption", "")

    def reply(similarity: TextSimilarity) -> str:
        close = overlap(word, caption) > 0 or similarity.max_sim(word, sentences(caption)) >= CLOSE
        return "yes" if close else "no"

    return StandIn(texts=frozenset({word, *sentences(caption)}), reply=reply)
