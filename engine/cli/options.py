"""Options several commands share, written once: a protocol's params as `protocols[].params` in a sweep (--mode,
--prompts, --param: `capeval judge`, `judge validate`, `score`), and how --captions is read (`[[captions]]`'s
format and id_field: `capeval judge`, `judge validate`)."""

from __future__ import annotations

from pathlib import Path

from capeval.engine.inputs.tool_formats import CAPTION_FORMATS, DEFAULT_ID_FIELDS


def add_protocol_options(p) -> None:
    """--mode, --prompts and --param: protocol params, as `protocols[].params` in a sweep."""
    p.add_argument("--mode", choices=("strict", "official"),
                   help="strict (capeval's rules, the default) or official (the benchmark's own scripts' rules)")
    p.add_argument("--prompts", type=Path, metavar="PACK",
                   help="prompt pack (TOML) to judge with, e.g. ../shared/protocols/<name>.toml")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="protocol parameter (value parsed as JSON when it parses), repeatable, e.g. "
                        "judge_frames=\"linspace:32\"")


def add_captions_format_options(p) -> None:
    """--captions-format and --captions-id-field: --captions as another tool's output, as `[[captions]] format` and
    `id_field` in a sweep (docs/inputs.md, "Captions from other tools")."""
    defaults = ", ".join(f"{tool} {field}" for tool, field in DEFAULT_ID_FIELDS.items())
    p.add_argument("--captions-format", choices=CAPTION_FORMATS, default=None, metavar="FORMAT",
                   help="what --captions is: capeval (a CAPTIONS table, the default), lmms-eval (a --log_samples "
                        "<date>_samples_<task>.jsonl), vlmevalkit (a <model>_<dataset>.xlsx/.tsv prediction file; "
                        ".xlsx needs the xlsx extra) or inspect (an inspect_ai .json/.eval log); the captioner "
                        "label is the model the file names")
    p.add_argument("--captions-id-field", metavar="FIELD",
                   help=f"with --captions-format: the (dotted) record field that names the video, e.g. doc.video_id "
                        f"or metadata.video_id (default: {defaults})")
