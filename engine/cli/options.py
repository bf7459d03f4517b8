"""Options several commands share, written once: a protocol's params as `protocols[].params` in a sweep (--mode,
--prompts, --param: `capeval judge`, `judge validate`, `score`)."""

from __future__ import annotations

from pathlib import Path


def add_protocol_options(p) -> None:
    """--mode, --prompts and --param: protocol params, as `protocols[].params` in a sweep."""
    p.add_argument("--mode", choices=("strict", "official"),
                   help="strict (capeval's rules, the default) or official (the benchmark's own scripts' rules)")
    p.add_argument("--prompts", type=Path, metavar="PACK",
                   help="prompt pack (TOML) to judge with, e.g. ../shared/protocols/<name>.toml")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="protocol parameter (value parsed as JSON when it parses), repeatable, e.g. "
                        "judge_frames=\"linspace:32\"")
