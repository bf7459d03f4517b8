"""`--by COLUMN[,COLUMN]` for the scoring commands (`capeval score`, `capeval judge`, `capeval report`): the flag
(the check and the breakdown rows: engine/judge_run/breakdowns.py; docs/breakdowns.md)."""

from __future__ import annotations

import argparse

from capeval.engine.metrics.breakdowns import parse_by


def add_by_option(p) -> None:
    """`--by COLUMN[,COLUMN]` (score, judge, report): the metrics per level of item attributes too."""
    p.add_argument("--by", metavar="COLUMN[,COLUMN]", type=_by, default=(),
                   help="also the metrics per level of these item attributes: ITEMS columns (task, category, "
                        "media_type, ...), keys of the items' extra JSON (extra.KEY or KEY), duration_bucket, "
                        "n_scenes; each level with its own bootstrap, beside the unsplit rows (by = all)")


def _by(text: str) -> tuple[str, ...]:
    try:
        return parse_by(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
