"""`capeval construct capability-qa`: CAPability-QA and KT ("know but cannot tell", paper §3.3, Eq. 4, Table 6).

  questions  the release's annotations -> multiple-choice and open questions (engine/protocols/capability/qa.py)
  answer     the captioning model answers them: the questions go through the caption stage (decode on Ray, caption
             actors, answers stored as they finish, keyed by frames + captioner + revision + question text +
             settings), so a rerun or a killed run started again asks only what has no answer yet
  grade      multiple choice by the documented letter parser (qa.parse_choice); open answers by a judge with
             capeval's grading prompt (kt_pack.toml; the paper publishes none) through the judgment cache
  kt         with --caption-verdicts (a sweep's run folder, a `capeval judge --out` table or released
             judgments/<model>/): QA accuracy, KT and the caption F1 per task and averaged (protocols/capability/kt.py)

Outputs in --out: items.jsonl (the questions as items), qa_verdicts.parquet (one row per question: the answer, how it
was read or graded, CORRECT / WRONG or no verdict with the reason), kt.parquet (long metrics: f1, qa_accuracy, kt),
record.parquet, construct.json, and answers/ (the answers as caption rows), frames/ (the frame cache). Written into
<run folder>/capability_qa, the run's `capeval report` shows KT beside F1.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import polars as pl
import pyarrow as pa

from capeval.engine.construct.base import ConstructContext, RecordLog, StepStats
from capeval.engine.construct.pipeline import ConstructionPipeline, PipelineResult
from capeval.engine.errors import UsageError
from capeval.engine.frames.cache import frames_key_at
from capeval.engine.frames.sampling import FrameSpec
from capeval.engine.frames.sizes import frame_size_for
from capeval.engine.keys import caption_key
from capeval.engine.params import key_values
from capeval.engine.protocols.capability.codes import TASKS, CapabilityQAVerdict
from capeval.engine.protocols.capability.kt import format_kt_table, kt_table, kt_wide, qa_accuracy
from capeval.engine.protocols.capability.kt_grading import OpenAnswerGrading, choice_row, grading_pack, open_row, qa_verdicts
from capeval.engine.protocols.capability.qa import QA_VERSION, OPEN_TASKS, Question, build_questions
from capeval.engine.protocols.capability.release import load_items, load_judgments
from capeval.engine.ray_local import init_ray
from capeval.engine.report.rundir import load_run
from capeval.engine.schemas import CAPTIONS, ITEMS
from capeval.engine.secrets import without_secrets


QA_MAX_TOKENS = 256  # answers are a letter or a short phrase; an OCR answer may be a line of text
DEFAULT_FRAMES = "uniform:8"

EPILOG = """input: the CAPability release's annotations/ (or one <task>.jsonl) and the media they name (--media-root:
the folder their file_path values are relative to). The questions are asked of --captioner, the model whose
captions were judged; --caption-verdicts gives those verdicts.

examples:
  capeval construct capability-qa --annotations CAPability/annotations --media-root CAPability \\
      --captioner openai --captioner-option model=gpt-4o --label gpt-4o --judge openai --judge-model gpt-4.1 \\
      --caption-verdicts runs/cap --out runs/cap/capability_qa
  capeval capability kt --qa-verdicts runs/cap/capability_qa/qa_verdicts.parquet --caption-verdicts runs/cap"""


class CapabilityQAPipeline(ConstructionPipeline):
    name = "capability-qa"
    summary = "CAPability-QA from annotations; the captioning model answers; graded; KT beside F1"
    steps = ("answer", "grade")
    local_steps = ("answer",)  # asked of the captioner (--captioner), not of a judge
    epilog = EPILOG

    def add_arguments(self, p) -> None:
        p.add_argument("--annotations", required=True, type=Path, help="the release's annotations/ folder (or one "
                       "<task>.jsonl)")
        p.add_argument("--media-root", type=Path, default=None, help="folder the annotations' file_path values are "
                       "relative to")
        p.add_argument("--tasks", default=None, help="comma-separated tasks (default: every task file present)")
        p.add_argument("--limit", type=int, default=None, metavar="N", help="only the first N items of each task")
        p.add_argument("--seed", type=int, default=0, help="seed of the distractors and option order")
        p.add_argument("--captioner", default="local", help="captioner backend answering the questions (local | "
                       "openai | vllm | ...)")
        p.add_argument("--captioner-option", action="append", default=[], metavar="KEY=VALUE",
                       help="captioner option (value parsed as JSON when it parses), repeatable")
        p.add_argument("--label", default=None, help="the captioner's name in the results (default: its model "
                       "option, else the backend name); match the caption verdicts' captioner")
        p.add_argument("--frames", default=DEFAULT_FRAMES, metavar="SPEC", help="frames shown with each question "
                       f"(default {DEFAULT_FRAMES}; an image is one frame)")
        p.add_argument("--caption-actors", type=int, default=1, help="caption actors answering at once")
        p.add_argument("--caption-verdicts", type=Path, default=None, metavar="PATH", help="CAPability verdicts of "
                       "the same model's captions: a run folder, a verdicts Parquet or judgments/<model>/")
        p.add_argument("--kt-mode", choices=("official", "strict"), default="official", help="caption metrics' mode "
                       "for F1 and KT (official: items without a caption verdict are left out)")
        p.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples of videos (0: no CIs)")

    def pack(self, mode, prompts):
        if mode == "official":
            raise UsageError("capability-qa has no official mode: the paper and the official code publish no QA "
                             "prompts and no grading rule; run it in strict mode (capeval's own, docs/construct.md)")
        return grading_pack(prompts)

    def judged_steps(self, args):
        tasks = _tasks(args)
        return ("grade",) if any(t in OPEN_TASKS for t in tasks) else ()

    def check(self, args) -> None:
        if not args.annotations.exists():
            raise UsageError(f"--annotations {args.annotations}: not found")
        if args.limit is not None and args.limit < 1:
            raise UsageError(f"--limit must be at least 1, got {args.limit}")
        if args.caption_verdicts is not None and not args.caption_verdicts.exists():
            raise UsageError(f"--caption-verdicts {args.caption_verdicts}: not found")
        try:
            FrameSpec.parse(args.frames)
        except ValueError as exc:
            raise UsageError(f"--frames {args.frames!r}: {exc}") from None
        _tasks(args)

    def run(self, args, ctx: ConstructContext) -> PipelineResult:
        params = key_values(args.captioner_option, "--captioner-option")
        label = args.label or str(params.get("model") or params.get("model_path") or args.captioner)
        tasks = _tasks(args)
        items = load_items(args.annotations, tasks, media_root=args.media_root)
        items = _first_per_task(items, args.limit)
        questions = build_questions(items, seed=args.seed)
        ctx.log(f"{len(questions)} questions from {items.num_rows} items ({len(tasks)} tasks)")
        answers = answer_questions(questions, args.captioner, params, args.frames, args.out, ctx,
                                   actors=args.caption_actors)
        graded = grade_open(questions, answers, ctx)
        judge = graded.pop(None, "")
        rows = [choice_row(q, answers.get(q.qa_id), label) if q.kind == "choice"
                else open_row(q, answers.get(q.qa_id), graded.get(q.qa_id), label, judge) for q in questions]
        qa = qa_verdicts(rows)
        log = _record(questions, answers, rows)
        tables = {"qa_verdicts": qa}
        notes = [_summary(qa)]
        if args.caption_verdicts is not None:
            caption = load_caption_verdicts(args.caption_verdicts, args.annotations, tasks)
            long = kt_table(qa, caption, mode=args.kt_mode, n_resamples=args.resamples)
            tables["kt"] = long.to_arrow()
            print(format_kt_table(kt_wide(long), mode=args.kt_mode))
        else:
            tables["qa_accuracy"] = qa_accuracy(qa, n_resamples=args.resamples).to_arrow()
            notes.append("no --caption-verdicts: QA accuracy only (qa_accuracy.parquet); KT needs the caption "
                         "verdicts of the same model")
        return PipelineResult(_items(questions), log, tables=tables, notes=notes)


def _tasks(args) -> list[str]:
    if not args.tasks:
        path = Path(args.annotations)
        present = [t for t in TASKS if (path / f"{t}.jsonl").is_file()] if path.is_dir() else [path.stem]
        return present or list(TASKS)
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise UsageError(f"--tasks: unknown task(s) {unknown}; tasks: {', '.join(TASKS)}")
    return tasks


def _first_per_task(items: pa.Table, limit: int | None) -> pa.Table:
    if limit is None:
        return items
    df = pl.from_arrow(items).with_row_index("_row")
    keep = df.group_by("task", maintain_order=True).head(limit).sort("_row").drop("_row")
    return keep.to_arrow().cast(items.schema)


def captioner_revision(name: str, params: dict) -> str:
    from capeval.engine.sweep.runner import component_revision  # deferred: the sweep runner, for one function

    return component_revision("captioner", SimpleNamespace(name=name, params=params))


def answer_questions(questions: list[Question], captioner: str, params: dict, frame_spec: str, out: Path,
                     ctx: ConstructContext, *, actors: int = 1) -> dict[str, dict]:
    """qa_id -> the answer's caption row (text, or error when it failed), through the caption stage."""
    import time

    from capeval.engine.stages.caption import CaptionTask, read_captions, run_caption_stage  # deferred: asyncio, ssl
    from capeval.engine.stages.decode import decode_stream  # deferred: the Ray decode stage
    from capeval.engine.store import GroupCommit, SegmentStore  # deferred: sqlite and the stores

    t0 = time.perf_counter()
    videos: dict[str, tuple[str, list[Question]]] = {}
    for q in questions:
        videos.setdefault(q.video_id, (q.media_path or "", []))[1].append(q)
    if videos and not any(Path(path).is_file() for path, _ in videos.values()):
        example = next(iter(videos.values()))[0]
        raise UsageError(f"no media found for the questions (e.g. {example!r}): pass --media-root, the folder the "
                         f"annotations' file_path values are relative to")
    revision = captioner_revision(captioner, params)
    size = frame_size_for(params)
    settings = {"params": without_secrets(params), "max_tokens": QA_MAX_TOKENS, "capability_qa": QA_VERSION}
    keys: dict[str, str] = {}
    failed: dict[str, str] = {}

    def tasks():
        todo = [(vid, path) for vid, (path, _) in videos.items()]
        for rows in decode_stream(todo, [frame_spec], cache_dir=str(out / "frames"), progress=ctx.progress,
                                  desc="decode [capability-qa]", size=size):
            for r in rows:
                for q in videos[r["video_id"]][1]:
                    if r["failure"] is not None:
                        failed[q.qa_id] = r["failure"].message
                        continue
                    key = caption_key(frames_key_at(r, size), captioner, revision, q.prompt, settings)
                    keys[q.qa_id] = key
                    yield CaptionTask(key, r["video_id"], r["path"], tuple(r["timestamps"] or ()), r["frame_spec"],
                                      f"capability-qa/{q.task}", q.prompt, max_tokens=QA_MAX_TOKENS,
                                      media_type=q.media_type or "video",
                                      question=json.dumps(q.backend_fields(), ensure_ascii=False))

    init_ray()
    store = SegmentStore(out / "answers", CAPTIONS, group=GroupCommit.from_env())
    try:
        stats = run_caption_stage(tasks(), captioner=captioner, params=params, store=store, n_videos=len(videos),
                                  num_actors=actors, progress=ctx.progress)
    finally:
        store.close()
    stored = {r["caption_key"]: r for r in read_captions(store, keys.values()).to_pylist()}
    out_rows = {}
    for q in questions:
        key = keys.get(q.qa_id)
        row = stored.get(key) if key else None
        if row is None or row.get("text") is None:
            why = failed.get(q.qa_id) or stats["failures"].get(key) or (row or {}).get("error") or "not answered"
            row = {"caption_key": key, "captioner": captioner, "prompt_id": f"capability-qa/{q.task}",
                   "frame_spec": frame_spec, "text": None, "error": why}
        out_rows[q.qa_id] = row
    answered = ctx.stats["answer"] = StepStats(asks=len(questions), sent=stats["captioned"] + stats["failed"],
                                               cached=stats["cached"], wall_s=time.perf_counter() - t0)
    for r in out_rows.values():
        if r["text"] is None:
            answered.fail(r["error"])
    return out_rows


def grade_open(questions: list[Question], answers: dict[str, dict], ctx: ConstructContext) -> dict:
    """qa_id -> the judge's verdict row for every answered open question (key None: the judge's name)."""
    import time

    from capeval.engine.judging.runner import run_judging  # deferred: the judge loop (asyncio, sqlite)

    pairs = [(q, answers[q.qa_id]) for q in questions
             if q.kind == "open" and answers.get(q.qa_id, {}).get("text") is not None]
    if not pairs:
        return {}
    t0 = time.perf_counter()
    label, judge = ctx.judges_for("grade")[0]
    grader = OpenAnswerGrading(ctx.pack)
    requests = grader.grade_requests(pairs, judge=judge.name, judge_revision=judge.revision)
    ctx.log(f"grade: {len(pairs)} open answers to {label}")
    verdicts, summary = run_judging(requests, judge, cache_dir=ctx.cache_dir, protocol=grader,
                                    progress=ctx.progress, return_summary=True, max_in_flight=ctx.max_in_flight)
    by_item = {(r["task"], r["item_id"], int(r["sub_index"] or 0)): r for r in verdicts.to_pylist()}
    out: dict = {None: label}
    for q, _ in pairs:
        out[q.qa_id] = by_item.get((q.task, q.item_id, int(q.sub_index or 0)))
    stats = ctx.stats["grade"] = StepStats(asks=len(pairs), sent=summary.sent, cached=summary.cached,
                                           wall_s=time.perf_counter() - t0)
    for q, _ in pairs:
        row = out[q.qa_id]
        if row is None or row["verdict"] < 0:
            stats.fail("no verdict row" if row is None else row["error"] or row["detail"] or "no verdict")
    return out


def load_caption_verdicts(path: Path, annotations: Path | None = None, tasks=None) -> pl.DataFrame:
    """CAPability caption verdicts from a run folder (its capability cells, labelled), a verdicts Parquet, or a
    released judgments/<model>/ folder (read against `annotations`)."""
    path = Path(path)
    if path.is_file():
        if path.suffix != ".parquet":
            raise UsageError(f"--caption-verdicts {path}: expected a verdicts .parquet, a run folder or a judgments "
                             f"folder")
        return pl.read_parquet(path)
    if (path / "verdicts").is_dir() or (path / "results.parquet").is_file():
        verdicts = load_run(path).verdicts
        if verdicts is None:
            raise UsageError(f"--caption-verdicts {path}: the run folder holds no verdicts")
        verdicts = verdicts.filter(pl.col("protocol_name") == "capability")
        if verdicts.height == 0:
            raise UsageError(f"--caption-verdicts {path}: no CAPability verdicts in this run folder")
        return verdicts
    if any(path.glob("*.jsonl")):
        if annotations is None:
            raise UsageError(f"--caption-verdicts {path}: released judgments need --annotations")
        present = [t for t in (tasks or TASKS) if (path / f"{t}.jsonl").is_file()]
        items = load_items(annotations, present)
        return pl.from_arrow(load_judgments(path, items, on_unknown="count", tasks=present).verdicts)
    raise UsageError(f"--caption-verdicts {path}: not a run folder, verdicts Parquet or judgments folder")


def _items(questions: list[Question]) -> pa.Table:
    """The questions as ITEMS rows (item_id gets '/<object>' for the per-object questions of one item)."""
    rows = [{"benchmark": "capability-qa", "task": q.task,
             "item_id": q.item_id if q.sub_index is None else f"{q.item_id}/{q.sub_index}", "video_id": q.video_id,
             "media_path": q.media_path, "media_type": q.media_type, "annotation": q.question, "options": q.options,
             "answer": q.answer, "category": q.kind,
             "extra": json.dumps({"qa_id": q.qa_id, "source_item": q.item_id, "sub_index": q.sub_index,
                                  "answer_text": q.answer_text, "prompt": q.prompt}, ensure_ascii=False)}
            for q in questions]
    return pa.Table.from_pylist(rows, schema=ITEMS) if rows else ITEMS.empty_table()


def _record(questions: list[Question], answers: dict, rows: list[dict]) -> RecordLog:
    log = RecordLog("capability-qa")
    for q, v in zip(questions, rows):
        ans = answers.get(q.qa_id) or {}
        item = q.item_id if q.sub_index is None else f"{q.item_id}/{q.sub_index}"
        log.add("answer", item, q.video_id, kept=ans.get("text") is not None, request_key=ans.get("caption_key"),
                output=ans.get("text"), reason="answered" if ans.get("text") is not None else f"no answer: "
                f"{ans.get('error')}")
        verdict = {int(CapabilityQAVerdict.CORRECT): "correct", int(CapabilityQAVerdict.WRONG): "wrong"}
        log.add("grade", item, q.video_id, kept=v["verdict"] >= 0, request_key=v["request_key"],
                output=v["detail"], reason=verdict.get(v["verdict"], f"no verdict: {v['error']}"))
    return log


def _summary(qa: pa.Table) -> str:
    v = qa.column("verdict").to_pylist()
    correct = sum(x == int(CapabilityQAVerdict.CORRECT) for x in v)
    none = sum(x < 0 for x in v)
    return f"{len(v)} questions: {correct} answered correctly, {len(v) - correct - none} wrongly, {none} without " \
           f"a verdict"


PIPELINE = CapabilityQAPipeline()
