"""`capeval judge`: render one protocol's judge requests for items x captions, judge them through the content-
addressed cache (a rerun or a resumed run sends only what is missing), write a VERDICTS Parquet file and print the
protocol's metrics.

Items and captions are the files people have (JSONL, CSV, Parquet; docs/inputs.md) or a benchmark's release
layout (`--dataset capability`, detected automatically for CAPability annotation files and folders). Everything is
checked before the first request: tables, protocol params, and that `--out` can be written."""

from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path

from capeval.engine.cli.breakdowns import add_breakdowns, add_by_option, check_by, metrics_of
from capeval.engine.cli.judge_checks import build_judge, check_pairs, key_values
from capeval.engine.errors import UsageError
from capeval.engine.protocols.base import count_uncaptioned_items
from capeval.engine.safetext import clip

USAGE = """examples:
  capeval judge --protocol capability --items ../shared/data/capability/annotations/object_color.jsonl \\
      --captions ../shared/data/capability/captions/gpt-4o-0806/object_color.jsonl --judge local --out v.parquet
  capeval judge --protocol capquiz --items items.csv --captions captions.jsonl --judge local --out verdicts.parquet
  capeval judge --protocol vidcapbench ... --judge openai --judge-model gpt-4.1 --seeds 0,1,2
  capeval judge --protocol capability --mode official --prompts ../shared/protocols/capability.toml ...
  capeval judge --protocol lvcap ... --judge openai --judge-model Qwen/Qwen2.5-72B-Instruct \\
      --base-url http://gpu-node:8000/v1        (a vLLM server; see docs/judges.md)
"""


def register(subparsers) -> None:
    p = subparsers.add_parser("judge", help="judge captions with one protocol (cached, resumable), print metrics",
                              epilog=USAGE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--protocol", required=True, help="capquiz | lvcap | capability | vidcapbench | vcinspector")
    p.add_argument("--items", required=True, type=Path,
                   help="items: JSONL/CSV/Parquet (docs/inputs.md) or a release file/folder (see --dataset)")
    p.add_argument("--captions", type=Path,
                   help="captions: JSONL/CSV/Parquet with video_id|item_id and caption, or a CAPability "
                        "captions/<model>/ folder (optional for datasets that bring captions: vatex_eval)")
    p.add_argument("--dataset", metavar="KIND",
                   help="read --items as this dataset kind (capeval list kinds); default: detect the CAPability "
                        "release layout, else an items table")
    p.add_argument("--media-root", type=Path, help="folder the dataset's media paths are relative to")
    p.add_argument("--frames", type=Path, help="FRAMES Parquet (VC-Inspector: frames shown to the judge); default: "
                   "decode the items' media with the protocol's judge_frames spec (cached under --cache)")
    p.add_argument("--frame-size", type=int, default=448, help="longer side of frames decoded for the judge")
    p.add_argument("--judge", required=True, help="judge backend: local | replay | vllm | openai")
    p.add_argument("--judge-model", help="model path or name (vLLM: a local path or HF id; openai: model name)")
    p.add_argument("--base-url", help="OpenAI-compatible endpoint, e.g. a vLLM server's http://host:8000/v1")
    p.add_argument("--judge-option", action="append", default=[], metavar="KEY=VALUE",
                   help="backend option (value parsed as JSON when it parses), repeatable; replay: replies=FILE")
    add_protocol_options(p)
    p.add_argument("--seeds", default="0", help="comma-separated judge seeds; one trial per seed (default 0)")
    p.add_argument("--limit", type=int, metavar="N", help="judge only the items of the first N videos (file order)")
    p.add_argument("--cache", type=Path, default=Path(".capeval/judge-cache"),
                   help="judgment cache directory, shared by runs (default .capeval/judge-cache)")
    p.add_argument("--out", required=True, type=Path, help="VERDICTS Parquet to write (checked before judging)")
    p.add_argument("--metrics", type=Path, help="also write the metrics as CSV here")
    p.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples for the metrics' CIs (0: none)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-reasks", type=int, default=None, help="re-asks for malformed output (default: the "
                   "protocol's policy for --mode)")
    p.add_argument("--keep-intermediate", action="store_true", help="also keep answer/extract step rows")
    p.add_argument("--max-failure-share", type=float, default=0.0, metavar="X",
                   help="exit 0 only when at most this share of verdict rows has no verdict (default 0); else the run "
                        "completes with exit code 3 and a rerun asks only the failed requests again")
    add_by_option(p)
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.set_defaults(func=run)


def add_protocol_options(p) -> None:
    """--mode, --prompts and --param: protocol params, as `protocols[].params` in a sweep (shared with score)."""
    p.add_argument("--mode", choices=("strict", "official"),
                   help="strict (capeval's rules, the default) or official (the benchmark's own scripts' rules)")
    p.add_argument("--prompts", type=Path, metavar="PACK",
                   help="prompt pack (TOML) to judge with, e.g. ../shared/protocols/capability.toml")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="protocol parameter (value parsed as JSON when it parses), repeatable, e.g. "
                        "judge_frames=\"linspace:32\"")


def protocol_params(args) -> dict:
    """Protocol params from --param, --mode and --prompts, checked like a sweep's protocols[].params."""
    from capeval.engine.sweep.validation import protocol_param_problems

    params = key_values(args.param, "--param")
    if args.mode:
        params["mode"] = args.mode
    if args.prompts:
        params["prompts"] = str(args.prompts)
    problems = protocol_param_problems(params, Path.cwd(), protocol=args.protocol)
    if problems:
        raise UsageError("; ".join(f"--param {k}: {m}" if k not in ("mode", "prompts") else f"--{k}: {m}"
                                   for k, m in problems))
    return params


def accepted(fn, params: dict) -> dict:
    """The params `fn` takes (all of them when it takes **kwargs)."""
    sig = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.values()):
        return dict(params)
    return {k: v for k, v in params.items() if k in sig}


def load_dataset(path: Path, dataset: str | None, media_root: Path | None, protocol: str):
    """(ITEMS, CAPTIONS that came with the dataset or None) from --items as the given or detected kind."""
    from capeval.engine.protocols.capability.release import is_release_file
    from capeval.engine.datasets.registry import load
    from capeval.engine.inputs import read_items

    kind = dataset or ("capability" if path.is_dir() or is_release_file(path) else "items")
    if kind == "items":
        if media_root is not None:
            raise UsageError("--media-root applies to dataset kinds; an items table gives media_path itself")
        return read_items(path, benchmark=protocol), None
    params = {"path": str(path.resolve())}
    if media_root is not None:
        params["media_root"] = str(media_root.resolve())
    try:
        loaded = load(kind, params, base_dir=Path.cwd())
    except KeyError as exc:
        raise UsageError(f"--dataset: {exc.args[0]}") from None
    return loaded.items, loaded.captions


def load_items(path: Path, dataset: str | None, media_root: Path | None, protocol: str):
    return load_dataset(path, dataset, media_root, protocol)[0]


def caption_file_rules(protocol: str, params: dict) -> dict:
    """How a run of `protocol` with these params reads a user's caption file (read_captions keywords)."""
    from capeval.engine.registry import lookup

    try:
        return lookup("protocol", protocol).caption_file_rules(params.get("mode"))
    except KeyError as exc:
        raise UsageError(str(exc.args[0])) from None


def load_captions(path: Path, items, rules: dict | None = None):
    """CAPTIONS from --captions; `rules`: read_captions keywords (caption_file_rules)."""
    from capeval.engine.inputs import read_captions

    if path.is_dir():  # a CAPability captions/<model>/ folder: one <task>.jsonl per task
        from capeval.engine.protocols.capability.release import load_captions as load_release_captions

        return load_release_captions(path, items)
    from capeval.engine.datasets.video_ids import with_dataset_video_ids

    # a caption may name its video by the media file (docs/inputs.md "Video ids")
    captions, _ = with_dataset_video_ids(read_captions(path, **(rules or {})), items)
    if set(items.column("benchmark").to_pylist()) == {"capability"}:
        # released captions: label them as `capeval capability score` does (per-media prompt, frames "released")
        import pyarrow as pa

        from capeval.engine.protocols.capability.release import RELEASED_FRAME_SPEC, prompt_id_for

        media = dict(zip(items.column("video_id").to_pylist(), items.column("media_type").to_pylist()))
        prompts = [prompt_id_for(media.get(v) or "video") if p == "file" else p
                   for v, p in zip(captions.column("video_id").to_pylist(), captions.column("prompt_id").to_pylist())]
        specs = [RELEASED_FRAME_SPEC if f == "file" else f for f in captions.column("frame_spec").to_pylist()]
        captions = captions.set_column(captions.schema.get_field_index("prompt_id"), "prompt_id",
                                       pa.array(prompts, pa.string()))
        captions = captions.set_column(captions.schema.get_field_index("frame_spec"), "frame_spec",
                                       pa.array(specs, pa.string()))
    return captions


def limit_items(items, n: int | None):
    if n is None:
        return items
    if n < 1:
        raise UsageError(f"--limit must be at least 1, got {n}")
    import pyarrow as pa
    import pyarrow.compute as pc

    keep = list(dict.fromkeys(items.column("video_id").to_pylist()))[:n]
    return items.filter(pc.is_in(items.column("video_id"), value_set=pa.array(keep, pa.string())))


def check_out(path: Path, flag: str = "--out") -> None:
    from capeval.engine.sweep.validation import writable_problem

    if path.is_dir():
        raise UsageError(f"{flag} {path}: is a folder; name the file to write")
    problem = writable_problem(path.parent)
    if problem:
        raise UsageError(f"{flag} {path}: cannot be written: {problem}")


def run(args) -> int:
    import polars as pl

    from capeval.engine.judging.runner import run_judging
    from capeval.engine.store.segments import write_parquet_atomic

    import time

    from capeval.engine.cli import terminal_text

    started = time.time()
    if not 0.0 <= args.max_failure_share <= 1.0:
        raise UsageError(f"--max-failure-share must be within [0, 1], got {args.max_failure_share}")
    try:
        seeds = [int(s) for s in str(args.seeds).split(",") if s.strip()]
    except ValueError:
        raise UsageError(f"--seeds {args.seeds!r}: expected comma-separated integers") from None
    for flag, path in (("--out", args.out), ("--metrics", args.metrics)):
        if path is not None:
            check_out(path, flag)
    params, protocol, items, bundled = protocol_and_items(args)
    check_by(args.by, items)  # an unknown --by column fails here, before any judging
    captions = given_captions(args, items, bundled)
    frames = frames_for_judge(args, protocol, params, items)
    check_pairs(items, captions, args.captions or args.items)
    judge = build_judge(args.judge, args.judge_model, args.base_url, args.judge_option)
    from capeval.engine.store.transcripts import TranscriptSpool, beside

    spool = TranscriptSpool(args.out.parent, beside(args.out).stem)  # what the judge was sent: capeval show
    try:
        requests = protocol.build_requests(items, captions, judge=judge.name, judge_revision=judge.revision,
                                           seeds=seeds, frames=frames, **params)
        n_uncaptioned = count_uncaptioned_items(items, captions)
        print(f"[judge] {protocol.name}: {requests_wording(requests.num_rows, items, captions, seeds)}"
              + (f" ({n_uncaptioned} items have no caption)" if n_uncaptioned else ""), file=sys.stderr)
        extra = {"protocol_params": params} if "protocol_params" in inspect.signature(run_judging).parameters else {}
        verdicts, summary = run_judging(requests, judge, cache_dir=args.cache, protocol=protocol,
                                        batch_size=args.batch_size, max_reasks=args.max_reasks,
                                        progress=not args.no_progress, keep_intermediate=args.keep_intermediate,
                                        return_summary=True, transcripts=spool, **extra)
    except BaseException:
        spool.discard()
        raise
    finally:
        judge.close()
    write_parquet_atomic(verdicts, args.out)
    spool.commit(captions=dict(zip(captions.column("caption_key").to_pylist(), captions.column("text").to_pylist())))
    print(f"[judge] {summary}")
    print(f"[judge] wrote {verdicts.num_rows} verdict rows to {args.out}")
    from capeval.engine.report.metrics_text import format_table

    # CAPability's metrics take their groups from the verdicts; given CAPTIONS they fail on the missing verdict
    # column (engine/protocols/capability/metrics.py _with_groups), and they need nothing from them here.
    caps = None if protocol.name == "capability" else pl.from_arrow(captions)
    metrics = protocol.compute_metrics(pl.from_arrow(verdicts), items=pl.from_arrow(items), captions=caps,
                                       n_resamples=args.resamples, seed=0, **_for_metrics(args.protocol, params))
    from capeval.engine.metrics.reasons import explain_nulls

    metrics = explain_nulls(metrics, verdicts, captions=captions)  # no verdicts: null and why, never a number
    metrics = add_breakdowns(metrics, metrics_of(protocol, args.resamples, _for_metrics(args.protocol, params)),
                             verdicts, args.by, protocol=protocol.name, items=items, captions=caps, params=params)
    if args.metrics:
        metrics.write_csv(args.metrics)
        print(f"[judge] wrote {metrics.height} metric rows to {args.metrics}", file=sys.stderr)
    from capeval.engine.report.leaderboard import videos_per_system

    # the leaderboard and its breakdown; the long table of every metric row goes to --metrics (CSV)
    print(terminal_text(format_table(metrics, n_videos=videos_per_system(pl.from_arrow(verdicts)), every_row=False)))
    if not args.metrics:
        print(f"[judge] every metric row ({metrics.height}): add --metrics FILE to write them as CSV", file=sys.stderr)
    _record_run(args, protocol, judge, params, verdicts, summary, started)
    return _exit_code(verdicts, args.max_failure_share, getattr(protocol, "intermediate_steps", ()))


def requests_wording(n_requests: int, items, captions, seeds) -> str:
    """What the first-step requests count: each item against each caption set (captioner x prompt x frames) that
    captioned its video, once per seed -- "64 first-step requests from 32 items x 16 captions" read as 512."""
    sets = {tuple(r.values()) for r in captions.select(
        [c for c in ("captioner", "prompt_id", "frame_spec") if c in captions.column_names]).to_pylist()}
    n_videos = len(set(captions.column("video_id").to_pylist()))
    seeds_part = f" x {len(seeds)} seeds" if len(seeds) > 1 else ""
    return (f"{n_requests} first-step requests: {items.num_rows} items, each asked against the caption of its video "
            f"in each of {len(sets)} caption set{'s' if len(sets) != 1 else ''}{seeds_part} "
            f"({captions.num_rows} captions of {n_videos} videos)")


def _record_run(args, protocol, judge, params: dict, verdicts, summary, started: float) -> None:
    """run.json beside the verdict file (appended, never replaced): config, revisions, packs, counts, throughput."""
    import time

    from capeval.engine.packs import PackError, load_pack, resolve_pack
    from capeval.engine.runrecord import append_run_record, verdict_status_counts

    mode = params.get("mode", "strict")
    packs = {}
    for key, value in params.items():  # every pack the run named (prompts, event_prompts, ...)
        if isinstance(value, (str, Path)) and str(value).endswith(".toml"):
            try:
                packs[key] = load_pack(value).digest
            except PackError:
                pass
    if not packs:
        try:
            packs["prompts"] = resolve_pack(protocol.name, None, mode=mode).digest
        except PackError:
            pass
    wall = time.time() - started
    append_run_record(args.out.resolve().parent, command="judge", config={k: v for k, v in vars(args).items()
                                                                           if k != "func"},
                      components={"judges": {judge.name: judge.revision}}, modes={protocol.name: mode},
                      pack_digests=packs, counts_by_status={"verdicts": verdict_status_counts(verdicts),
                                                            "judging": summary.as_dict()},
                      wall_s=wall, throughput={"verdicts_per_s": verdicts.num_rows / wall if wall > 0 else None},
                      started_at=started)


def _exit_code(verdicts, max_failure_share: float, intermediate_steps=()) -> int:
    """0, or exitcodes.FAILURES when the share of rows without a verdict exceeds `max_failure_share`. Rows of
    intermediate steps (kept with --keep-intermediate: VidCapBench "answer", LVCap "extract") never carry a verdict
    code, so they are not counted: a failed intermediate step already shows as its next step's row without one."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from capeval.engine import exitcodes
    from capeval.engine.schemas import NO_VERDICT

    if intermediate_steps and verdicts.num_rows:
        verdicts = verdicts.filter(pc.invert(pc.is_in(verdicts.column("step"),
                                                      value_set=pa.array(list(intermediate_steps), pa.string()))))
    n = verdicts.num_rows
    missing = int(pc.sum(pc.equal(verdicts.column("verdict"), NO_VERDICT)).as_py() or 0) if n else 0
    if n and missing / n > max_failure_share:
        print(f"[judge] completed with failures: {missing} of {n} verdict rows have no verdict "
              f"({missing / n:.1%} > --max-failure-share {max_failure_share:g}): {_why_no_verdict(verdicts)}",
              file=sys.stderr)
        return exitcodes.FAILURES
    return exitcodes.OK


def _why_no_verdict(verdicts) -> str:
    """The rows without a verdict by cause, each with what a rerun does about it (only a backend failure is asked
    again: a missing caption or an unparseable, cached answer comes back the same)."""
    import pyarrow.compute as pc

    from capeval.engine.schemas import NO_VERDICT, ParseStatus

    status = verdicts.filter(pc.equal(verdicts.column("verdict"), NO_VERDICT)).column("parse_status").to_pylist()
    errors, unparsed = status.count(ParseStatus.ERROR), status.count(ParseStatus.FAILED)
    missing = len(status) - errors - unparsed
    parts = []
    if errors:
        parts.append(f"{errors} the judge backend failed to answer (a rerun of the same command asks them again)")
    if unparsed:
        parts.append(f"{unparsed} with no usable verdict in the judge's reply after the re-asks (the replies are "
                     "cached: a rerun reads the same; capeval show --failed shows them)")
    if missing:
        parts.append(f"{missing} never asked: no caption for their item, or an earlier step of theirs failed "
                     "(give the missing captions to judge them)")
    return "; ".join(parts) + "; each row's parse_status and error say why"


def protocol_and_items(args):
    """(params, protocol, items, captions the dataset brings or None) from the options `capeval judge` and
    `capeval judge validate` share: --param/--mode/--prompts, --protocol, --items/--dataset/--media-root, --limit."""
    from capeval.engine.registry import lookup

    params = protocol_params(args)
    try:
        protocol = lookup("protocol", args.protocol)
    except KeyError as exc:
        raise UsageError(str(exc.args[0])) from None
    items, bundled = load_dataset(args.items, args.dataset, args.media_root, args.protocol)
    items = limit_items(items, args.limit)
    # items the protocol cannot render: refused before any request, by file, row and column
    source = args.items if args.items.is_file() else None
    missing = protocol.columns_problem(items, source)
    problems = [missing] if missing else protocol.items_problems(items, source)
    if problems:
        raise UsageError(f"--protocol {args.protocol} cannot judge these items: " + "; ".join(problems))
    return params, protocol, items, bundled


def given_captions(args, items, bundled):
    """--captions read for these items, else the captions the dataset brought (a UsageError when neither)."""
    if args.captions is None and bundled is None:
        raise UsageError("--captions is required (this dataset brings no captions of its own)")
    if args.captions is None:
        return bundled
    return load_captions(args.captions, items, caption_file_rules(args.protocol, protocol_params(args)))


def frames_for_judge(args, protocol, params: dict, items):
    """FRAMES from --frames, else decoded for a protocol whose judge sees frames, else None."""
    from capeval.engine.schemas import FRAMES

    frames = _read_frames(args.frames, FRAMES) if args.frames else None
    if frames is None and protocol.judge_frames is not None:
        frames = judge_frames(items, params, protocol.judge_frames, args.cache / "frames", args.frame_size)
    return frames


def judge_frames(items, params: dict, default_spec: str, cache_dir: Path, size: int):
    """FRAMES for a multimodal judge, decoded from the items' media with `judge_frames` (set to the protocol's
    default spec, JudgeProtocol.judge_frames, when absent, so the requests name the frames they show); images give
    their one frame."""
    from capeval.engine.frames.cache import decode_videos_table

    spec = params.setdefault("judge_frames", default_spec)
    media = {v: p for v, p in zip(items.column("video_id").to_pylist(), items.column("media_path").to_pylist())
             if p is not None}
    if not media:
        raise UsageError("this protocol shows frames to its judge: give --frames, or items with media_path")
    missing = [p for p in media.values() if not Path(p).is_file()]
    if missing:
        raise UsageError(f"{len(missing)} of {len(media)} media files not found, e.g. {missing[0]}")
    print(f"[judge] decoding {spec} from {len(media)} videos/images for the judge", file=sys.stderr)
    table = decode_videos_table(list(media.values()), spec, size, cache_dir, video_ids=list(media))
    bad = [e for e in table.column("error").to_pylist() if e]
    if bad:
        print(f"[judge] {len(bad)} media could not be decoded (their items get no verdict), e.g. {clip(bad[0], 300)}",
              file=sys.stderr)
    return table


def _for_metrics(protocol: str, params: dict) -> dict:
    """The params the protocol's metrics module takes (build-only params such as prompts stay out)."""
    import importlib

    try:
        module = importlib.import_module(f"capeval.engine.protocols.{protocol}.metrics")
    except ModuleNotFoundError:
        return params
    return accepted(module.compute_metrics, params)


def _read_frames(path: Path, schema):
    import pyarrow.parquet as pq

    from capeval.engine.schemas import conform

    if not path.is_file():
        raise UsageError(f"frames file not found: {path}")
    try:
        return conform(pq.read_table(path), schema)
    except Exception as exc:  # noqa: BLE001 - a non-Parquet or wrong-schema file
        raise UsageError(f"{path}: not a valid FRAMES table: {exc}") from None
