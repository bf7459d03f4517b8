"""One `capeval judge` run: render the protocol's judge requests for items x captions, judge them through the
content-addressed cache (a rerun or a resumed run sends only what is missing), write a VERDICTS Parquet file, print
the protocol's metrics and append the run's record (run.json) beside the verdicts. Everything is checked before the
first request: tables, protocol params, and that the outputs can be written."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from capeval.engine import exitcodes
from capeval.engine.errors import UsageError
from capeval.engine.judge_run.backend import build_judge
from capeval.engine.judge_run.breakdowns import add_breakdowns, check_by, metrics_of
from capeval.engine.judge_run.inputs import (InputOptions, check_pairs, frames_for_judge, given_captions,
                                             protocol_and_items)
from capeval.engine.judge_run.options import check_out
from capeval.engine.judging.runner import run_judging
from capeval.engine.metrics.reasons import explain_nulls
from capeval.engine.packs import PackError, load_pack, resolve_pack
from capeval.engine.protocols.base import JudgeProtocol, count_uncaptioned_items
from capeval.engine.report.leaderboard import videos_per_system
from capeval.engine.report.metrics_text import format_table
from capeval.engine.runrecord import append_run_record, verdict_status_counts
from capeval.engine.safetext import terminal_text
from capeval.engine.schemas import NO_VERDICT, ParseStatus
from capeval.engine.store.segments import write_parquet_atomic
from capeval.engine.store.transcripts import CaptionTexts, TranscriptSpool, beside


@dataclass(frozen=True, kw_only=True)
class JudgeOptions(InputOptions):
    """A `capeval judge` run: its inputs, the judge backend (--judge, --judge-model, --base-url, --judge-option),
    the seeds (comma-separated), the outputs (--out VERDICTS, --metrics CSV) and how the run goes."""

    judge: str
    judge_model: str | None = None
    base_url: str | None = None
    judge_option: tuple[str, ...] = ()
    seeds: str = "0"
    out: Path
    metrics: Path | None = None
    resamples: int = 1000
    batch_size: int = 64
    max_reasks: int | None = None
    keep_intermediate: bool = False
    max_failure_share: float = 0.0
    by: tuple[str, ...] = ()
    no_progress: bool = False


def judge_items(options: JudgeOptions, record_config: dict) -> int:
    """Judge, write the verdicts, print the metrics, record the run (`record_config`: the command line as run.json
    keeps it); the exit code (exitcodes.OK, or FAILURES past --max-failure-share)."""
    started = time.time()
    if not 0.0 <= options.max_failure_share <= 1.0:
        raise UsageError(f"--max-failure-share must be within [0, 1], got {options.max_failure_share}")
    try:
        seeds = [int(s) for s in str(options.seeds).split(",") if s.strip()]
    except ValueError:
        raise UsageError(f"--seeds {options.seeds!r}: expected comma-separated integers") from None
    for flag, path in (("--out", options.out), ("--metrics", options.metrics)):
        if path is not None:
            check_out(path, flag)
    params, protocol, items, bundled = protocol_and_items(options)
    check_by(options.by, items)  # an unknown --by column fails here, before any judging
    captions = given_captions(options, protocol, params, items, bundled)
    frames = frames_for_judge(options, protocol, params, items)
    check_pairs(items, captions, options.captions or options.items)
    judge = build_judge(options.judge, options.judge_model, options.base_url, list(options.judge_option))
    spool = TranscriptSpool(options.out.parent, beside(options.out).stem)  # what the judge was sent: capeval show
    try:
        requests = protocol.build_requests(items, captions, judge=judge.name, judge_revision=judge.revision,
                                           seeds=seeds, frames=frames, **params)
        n_uncaptioned = count_uncaptioned_items(items, captions)
        print(f"[judge] {protocol.name}: {requests_wording(requests.num_rows, items, captions, seeds)}"
              + (f" ({n_uncaptioned} items have no caption)" if n_uncaptioned else ""), file=sys.stderr)
        verdicts, summary = run_judging(requests, judge, cache_dir=options.cache, protocol=protocol,
                                        batch_size=options.batch_size, max_reasks=options.max_reasks,
                                        progress=not options.no_progress, keep_intermediate=options.keep_intermediate,
                                        return_summary=True, transcripts=spool, protocol_params=params)
    except BaseException:
        spool.discard()
        raise
    finally:
        judge.close()
    write_parquet_atomic(verdicts, options.out)
    spool.commit(captions=CaptionTexts(captions))
    print(f"[judge] {summary}")
    print(f"[judge] wrote {verdicts.num_rows} verdict rows to {options.out}")
    caps = pl.from_arrow(captions) if protocol.metrics_read_captions else None
    metrics = protocol.compute_metrics(pl.from_arrow(verdicts), items=pl.from_arrow(items), captions=caps,
                                       n_resamples=options.resamples, seed=0, **protocol.metric_params(params))
    metrics = explain_nulls(metrics, verdicts, captions=captions)  # no verdicts: null and why, never a number
    metrics = add_breakdowns(metrics, metrics_of(protocol, options.resamples, protocol.metric_params(params)),
                             verdicts, options.by, protocol=protocol.name, items=items, captions=caps, params=params)
    if options.metrics:
        metrics.write_csv(options.metrics)
        print(f"[judge] wrote {metrics.height} metric rows to {options.metrics}", file=sys.stderr)
    # the leaderboard and its breakdown; the long table of every metric row goes to --metrics (CSV)
    print(terminal_text(format_table(metrics, n_videos=videos_per_system(pl.from_arrow(verdicts)), every_row=False)))
    if not options.metrics:
        print(f"[judge] every metric row ({metrics.height}): add --metrics FILE to write them as CSV", file=sys.stderr)
    record_run(options.out, record_config, protocol, judge, params, verdicts, summary, started)
    return exit_code(verdicts, options.max_failure_share, protocol.intermediate_steps)


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


def record_run(out: Path, config: dict, protocol, judge, params: dict, verdicts, summary, started: float) -> None:
    """run.json beside the verdict file (appended, never replaced): config, revisions, packs, counts, throughput."""
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
    append_run_record(out.resolve().parent, command="judge", config=config,
                      components={"judges": {judge.name: judge.revision}}, modes={protocol.name: mode},
                      pack_digests=packs, counts_by_status={"verdicts": verdict_status_counts(verdicts),
                                                            "judging": summary.as_dict()},
                      wall_s=wall, throughput={"verdicts_per_s": verdicts.num_rows / wall if wall > 0 else None},
                      started_at=started)


def exit_code(verdicts, max_failure_share: float, intermediate_steps=()) -> int:
    """0, or exitcodes.FAILURES when the share of rows without a verdict exceeds `max_failure_share`. Rows of
    intermediate steps (kept with --keep-intermediate, e.g. an "answer" or "extract" step) never carry a verdict
    code, so they are not counted: a failed intermediate step already shows as its next step's row without one."""
    if intermediate_steps and verdicts.num_rows:
        verdicts = verdicts.filter(pc.invert(pc.is_in(verdicts.column("step"),
                                                      value_set=pa.array(list(intermediate_steps), pa.string()))))
    n = verdicts.num_rows
    missing = int(pc.sum(pc.equal(verdicts.column("verdict"), NO_VERDICT)).as_py() or 0) if n else 0
    if n and missing / n > max_failure_share:
        print(f"[judge] completed with failures: {missing} of {n} verdict rows have no verdict "
              f"({missing / n:.1%} > --max-failure-share {max_failure_share:g}): {why_no_verdict(verdicts)}",
              file=sys.stderr)
        return exitcodes.FAILURES
    return exitcodes.OK


def why_no_verdict(verdicts) -> str:
    """The rows without a verdict by cause, each with what a rerun does about it (only a backend failure is asked
    again: a missing caption or an unparseable, cached answer comes back the same)."""
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
