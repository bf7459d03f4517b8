"""The CLI's implementation of `CommandTools` (engine/protocols/base.py): what a benchmark's own commands
(`JudgeProtocol.cli_commands`) use from the layers above the protocols -- building a judge as `capeval judge` does,
the judge loop, the leaderboards every scoring command prints, the local judge's sentence embeddings."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pyarrow as pa

from capeval.engine.protocols.base import JudgeHandle, JudgeProtocol


class CliCommandTools:
    """Each service imports its machinery on first use, so that building the parser stays fast (`capeval --help`)."""

    def build_judge(self, name: str, model: str | None, base_url: str | None, options: list[str]) -> JudgeHandle:
        from capeval.engine.judge_run.backend import build_judge  # deferred: the backends' registry (Ray, HTTP)

        return build_judge(name, model, base_url, options)

    def run_judging(self, requests: pa.Table, judge: JudgeHandle, *, cache_dir: Path, protocol: JudgeProtocol,
                    progress: bool) -> tuple[pa.Table, object]:
        from capeval.engine.judging.runner import run_judging  # deferred: the judge loop (Ray)

        return run_judging(requests, judge, cache_dir=cache_dir, protocol=protocol, progress=progress,
                           return_summary=True)

    def leaderboards(self, table, protocol: str) -> str:
        from capeval.engine.report.leaderboard import format_leaderboard, leaderboards  # deferred: bootstrap kernels

        return "\n\n".join(format_leaderboard(lb) for lb in leaderboards(table, protocol=protocol))

    def sentence_embeddings(self, texts: Sequence[str]):
        from capeval.adapters.local_judge import embedding_model  # deferred: torch

        return embedding_model().encode(list(texts), batch_size=64, normalize_embeddings=True,
                                        convert_to_numpy=True)
