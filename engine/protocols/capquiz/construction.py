"""`capeval construct capquiz`: CapQuiz items built the way the paper builds them (§3.2), from videos with a dense
description (and/or their frames, for multimodal models):

  taxonomy  the video's domain (construct/video_taxonomy; skipped when the input gives `category`)
  generate  candidate questions, 5 options each, with the generator's type label (construct/qa_generation)
  classify  the question type, one of the paper's ten: the generator's own label when it names one (as in the
            paper), else asked with capeval's construct/classify (`--classify all`: ask for every candidate)
  blind     blind-solvability filter: every blind judge answers without video or caption in shuffled trials;
            removed when every judge is right in >= min-correct of its trials (engine/protocols/capquiz/filtering.py)
  dedup     repeated questions of a video: the paper's LLM clustering (official) or sentence embeddings (strict);
            each cluster keeps its hardest question (lowest blind accuracy)
  balance   the correct option's position, uniform over the set (engine/construct/balance.py)

Outputs: items.jsonl (CapQuiz items: `capeval judge --protocol capquiz --items`, sweeps' `items` datasets) and
record.parquet (every step's row per video / candidate / trial: what was generated, kept or removed, and why)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from capeval.adapters.local_judge import embedding_model
from capeval.engine.construct.balance import balanced_positions, place_answer
from capeval.engine.construct.base import ConstructContext, RecordLog, StepStats, run_step
from capeval.engine.construct.pipeline import ConstructionPipeline, PipelineResult
from capeval.engine.errors import UsageError
from capeval.engine.frames.cache import decode_videos_table
from capeval.engine.frames.sampling import FrameSpec
from capeval.engine.inputs.rows import pick, read_rows, text_value
from capeval.engine.packs import load_pack, resolve_pack
from capeval.engine.protocols.capquiz.codes import CapQuizVerdict
from capeval.engine.protocols.capquiz.filtering import BlindProtocol, FilterSettings, blind_counts, decide
from capeval.engine.protocols.capquiz.types import builtin_types, normalize_type
from capeval.engine.schemas import ITEMS

from .construction_steps import ClassifyStep, DedupStep, GenerateStep, TaxonomyStep

CONSTRUCT_PACK = Path(__file__).resolve().parent / "construct_pack.toml"
PAPER_PER_TYPE = 10  # the paper's generation prompt asks for ten questions of each type

EPILOG = """input (--input): JSONL, CSV or Parquet, one row per video: video_id, description (or caption / text: the
dense description the questions are written from), media_path (optional; needed with --frames), category (optional:
the domain, which skips the taxonomy step for that video).

examples:
  capeval construct capquiz --input videos.jsonl --judge openai --judge-model gpt-4.1 --out quiz/
  capeval construct capquiz --input videos.jsonl --mode official --prompts ../shared/protocols/capquiz.toml \\
      --step-judge generate=openai@gen --step-judge blind=openai@a,openai@b \\
      --judge-option gen:model=gpt-4o --judge-option a:model=gpt-4.1 --judge-option b:model=gemini-2.5-pro \\
      --judge openai@dedup --judge-option dedup:model=gpt-4.1 --out quiz/
  capeval judge --protocol capquiz --items quiz/items.jsonl --captions captions.jsonl --judge local --out v.parquet"""


class CapQuizPipeline(ConstructionPipeline):
    name = "capquiz"
    summary = "CapQuiz items from dense descriptions: taxonomy, generation, types, blind filter, dedup, balancing"
    steps = ("taxonomy", "generate", "classify", "blind", "dedup", "balance")
    local_steps = ("balance",)
    epilog = EPILOG
    caps = {"generate": "questions per video and generating judge"}

    def default_caps(self, args) -> dict[str, int]:
        """Twice the questions the prompt asks for: strict --per-type per type, the paper's ten per type."""
        asked = (PAPER_PER_TYPE if args.mode == "official" else args.per_type) * len(builtin_types())
        return {"generate": 2 * asked}

    def add_arguments(self, p) -> None:
        p.add_argument("--input", required=True, type=Path, help="videos: video_id, description, [media_path], "
                       "[category] (JSONL/CSV/Parquet)")
        p.add_argument("--limit", type=int, default=None, metavar="N", help="only the first N videos")
        p.add_argument("--per-type", type=int, default=2, help="questions asked for per type and video (strict "
                       "prompt; the paper's asks for ten)")
        p.add_argument("--n-options", type=int, default=5, help="options per question (default 5, as the paper)")
        p.add_argument("--max-tokens", type=int, default=None, help="reply budget of a generation request (default: "
                       "strict 4096; official 16384, its prompt asks for ten questions per type)")
        p.add_argument("--frames", default=None, metavar="SPEC", help="also show frames decoded from media_path to "
                       "the taxonomy and generation steps (multimodal judges), e.g. uniform:8")
        p.add_argument("--frame-size", type=int, default=448, help="longer side of those frames")
        p.add_argument("--no-taxonomy", action="store_true", help="skip the domain step")
        p.add_argument("--classify", choices=("all", "unmapped", "none"), default=None,
                       help="which candidates the classify step asks about: unmapped (default: those whose "
                       "generator label names none of the ten types), all, none")
        p.add_argument("--trials", type=int, default=3, help="blind trials per judge (0: no blind filter)")
        p.add_argument("--min-correct", type=int, default=2, help="blindly solvable when every blind judge is right "
                       "in at least this many trials (default 2)")
        p.add_argument("--dedup", choices=("llm", "embeddings", "none"), default=None,
                       help="de-duplication (default: official llm, strict embeddings)")
        p.add_argument("--dedup-threshold", type=float, default=0.85, help="embeddings: cosine similarity of "
                       "questions and of answers above which two are duplicates")
        p.add_argument("--seed", type=int, default=0, help="seed of the answer-position order")
        p.add_argument("--no-balance", action="store_true", help="keep the generator's answer positions")

    def pack(self, mode, prompts):
        if mode == "official":
            return resolve_pack("capquiz", prompts, mode="official", official_name="capquiz")
        return load_pack(prompts) if prompts else load_pack(CONSTRUCT_PACK)

    def judged_steps(self, args):
        steps = [] if args.no_taxonomy else ["taxonomy"]
        steps.append("generate")
        if _classify_mode(args) != "none":
            steps.append("classify")
        if args.trials > 0:
            steps.append("blind")
        if _dedup_mode(args) == "llm":
            steps.append("dedup")
        return tuple(steps)

    def check(self, args) -> None:
        if args.limit is not None and args.limit < 1:
            raise UsageError(f"--limit must be at least 1, got {args.limit}")
        if not 2 <= args.n_options <= 9:
            raise UsageError(f"--n-options {args.n_options}: between 2 and 9 (the judge adds 'Cannot be determined')")
        if args.max_tokens is not None and args.max_tokens < 1:
            raise UsageError(f"--max-tokens must be at least 1, got {args.max_tokens}")
        if args.per_type < 1:
            raise UsageError(f"--per-type must be at least 1, got {args.per_type}")
        if args.trials < 0 or (args.trials and not 1 <= args.min_correct <= args.trials):
            raise UsageError(f"--trials {args.trials} / --min-correct {args.min_correct}: need 1 <= min-correct <= "
                             f"trials")
        if not -1.0 <= args.dedup_threshold <= 1.0:
            raise UsageError(f"--dedup-threshold {args.dedup_threshold}: a cosine similarity, between -1 and 1")

    def run(self, args, ctx: ConstructContext) -> PipelineResult:
        official = ctx.mode == "official"
        own = load_pack(CONSTRUCT_PACK)
        types = list(builtin_types())
        videos = read_videos(args.input, args.limit)
        frames = _frames(videos, args, ctx) if args.frames else {}
        log = RecordLog(self.name)
        domains = {} if args.no_taxonomy else _taxonomy(videos, frames, ctx, log, own, official)
        budget = args.max_tokens or (16384 if official else 4096)
        cap = args.step_caps["generate"]
        _plan_before_generation(videos, ctx, args, cap)
        cands = _generate(videos, frames, ctx, log, GenerateStep(types, args.n_options, args.per_type, budget, cap),
                          official)
        _plan_after_generation(cands, ctx, args, types)
        cands = _classify(cands, ctx, log, ClassifyStep(types, pack=own if official else None), _classify_mode(args))
        kept, record = _filter(cands, ctx, log, args, official)
        items = _balance(kept, args, log)
        rows = []
        for c in items:
            extra = {"source": "capeval construct capquiz", "generator": c["generator"],
                     "generator_category": c["label"], "blind_accuracy": record.get(c["item_id"]),
                     "answer_position": c["options"].index(c["answer"]), **domains.get(c["video_id"], {})}
            rows.append({"benchmark": "capquiz", "task": normalize_type(c["type"]), "item_id": c["item_id"],
                         "video_id": c["video_id"], "media_path": c.get("media_path"),
                         "media_type": "video" if c.get("media_path") else None, "annotation": c["question"],
                         "options": c["options"], "answer": c["answer"], "category": c["type"],
                         "extra": json.dumps(extra, ensure_ascii=False, sort_keys=True)})
        notes = [f"{len(videos)} videos -> {len(cands)} typed candidates -> {len(items)} items"]
        return PipelineResult(pa.Table.from_pylist(rows, schema=ITEMS), log, notes=notes)


def _plan_before_generation(videos, ctx, args, cap: int) -> None:
    """What generation may set off downstream, said before it is asked: each reply keeps at most `cap` questions."""
    n_gen = len(ctx.labels_for("generate"))
    most = len(videos) * n_gen * cap
    blind = most * args.trials * (len(ctx.labels_for("blind")) if args.trials > 0 else 0)
    ctx.log(f"plan: generate {len(videos) * n_gen} requests; at most {cap} questions kept per video and generator "
            f"(--max-per-item generate={cap}), so at most {most} candidates and {blind} blind requests")


def _plan_after_generation(cands, ctx, args, types) -> None:
    """The requests the candidates will cost, said before any of them is sent."""
    by_norm = {normalize_type(t["name"]) for t in types}
    mode = _classify_mode(args)
    classify = len(cands) if mode == "all" else sum(normalize_type(c["category"]) not in by_norm for c in cands) \
        if mode == "unmapped" else 0
    blind = len(cands) * args.trials * (len(ctx.labels_for("blind")) if args.trials > 0 else 0)
    dedup = len({c["video_id"] for c in cands}) if _dedup_mode(args) == "llm" else 0
    ctx.log(f"plan: {len(cands)} candidates -> up to {classify} classify, {blind} blind and {dedup} dedup requests")


def _classify_mode(args) -> str:
    return args.classify or "unmapped"


def _dedup_mode(args) -> str:
    return args.dedup or ("llm" if args.mode == "official" else "embeddings")


def read_videos(path: Path, limit: int | None) -> list[dict]:
    """Videos to build questions for: video_id, description (description | caption | text), media_path (relative to
    the file's folder), category."""
    if not path.is_file():
        raise UsageError(f"--input {path}: file not found")
    videos, seen = [], set()
    for n, rec in read_rows(path):
        col, vid = pick(rec, ("video_id", "file_id", "item_id"))
        if col is None:
            raise UsageError(f"{path}: row {n}: needs video_id (have {sorted(rec)})")
        vid = text_value(vid, path, n, col, required=True, id_like=True)
        if vid in seen:
            raise UsageError(f"{path}: row {n}: video_id {vid!r} appears twice")
        seen.add(vid)
        dcol, desc = pick(rec, ("description", "caption", "text"))
        media = text_value(rec.get("media_path"), path, n, "media_path", required=False)
        if media is not None and not Path(media).is_absolute():
            media = str((path.parent / media).resolve())
        videos.append({"video_id": vid, "description": text_value(desc, path, n, dcol or "description",
                                                                  required=media is None),
                       "media_path": media, "category": text_value(rec.get("category"), path, n, "category",
                                                                   required=False)})
        if limit is not None and len(videos) >= limit:
            break
    if not videos:
        raise UsageError(f"--input {path}: no videos")
    return videos


def _frames(videos: list[dict], args, ctx: ConstructContext) -> dict:
    media = {v["video_id"]: v["media_path"] for v in videos if v.get("media_path")}
    if not media:
        raise UsageError("--frames: no video of --input has a media_path")
    ctx.log(f"decoding {args.frames} from {len(media)} videos")
    table = decode_videos_table(list(media.values()), FrameSpec.parse(args.frames), args.frame_size,
                                ctx.cache_dir.parent / "frames", video_ids=list(media))
    return {r["video_id"]: r for r in table.to_pylist() if not r["error"]}


def _taxonomy(videos, frames, ctx, log, own, official) -> dict:
    step = TaxonomyStep(own.table("domain"))
    out, asks = {}, []
    for v in videos:
        if v.get("category"):
            out[v["video_id"]] = {"domain": v["category"]}
            log.add("taxonomy", v["video_id"], v["video_id"], kept=True, reason="domain given by the input")
        else:
            asks.append(step.ask(v, official=official, frames=frames.get(v["video_id"])))
    if not asks:
        return out
    for g in run_step(step, asks, ctx, ctx.judges_for("taxonomy")[0][1]):
        log.generated("taxonomy", g, kept=True, reason=f"domain {g.payload['domain']}" if g.ok else
                      f"no domain (the video is kept): {g.error}")
        if g.ok:
            out[g.ask.video_id] = {"domain": g.payload["domain"], "super_category": g.payload["super"]}
    return out


def _generate(videos, frames, ctx, log, step: GenerateStep, official: bool) -> list[dict]:
    by_id = {v["video_id"]: v for v in videos}
    judges = ctx.judges_for("generate")
    cands = []
    for label, judge in judges:
        asks = [step.ask(v, official=official, frames=frames.get(v["video_id"])) for v in videos]
        for g in run_step(step, asks, ctx, judge):
            vid = g.ask.video_id
            n_good = len(g.payload["questions"]) if g.ok else 0
            log.generated("generate", g, reason=f"{n_good} questions from {label}" if g.ok else None)
            if not g.ok:
                continue
            for bad in g.payload["rejected"]:
                log.add("generate", f"{vid}/{label}#{bad['index']}" if len(judges) > 1 else f"{vid}#{bad['index']}",
                        vid, kept=False, reason=f"malformed question: {bad['why']}", request_key=g.request_key,
                        output=bad["entry"])
            for k, q in enumerate(g.payload["questions"]):
                item_id = f"{vid}/{label}/q{k:02d}" if len(judges) > 1 else f"{vid}/q{k:02d}"
                if step.cap is not None and k >= step.cap:
                    log.add("generate", item_id, vid, kept=False, request_key=g.request_key, output=q,
                            reason=f"over the cap of {step.cap} questions per video and generator (--max-per-item "
                                   f"generate={step.cap}): never asked about")
                    continue
                cands.append({**q, "item_id": item_id, "video_id": vid, "generator": label,
                              "media_path": by_id[vid].get("media_path"), "label": q["category"],
                              "request_key": g.request_key})
    return cands


def _classify(cands, ctx, log, step: ClassifyStep, mode: str) -> list[dict]:
    by_norm = {normalize_type(n): n for n in step.names}
    for c in cands:
        c["type"] = by_norm.get(normalize_type(c["label"]))
    todo = [c for c in cands if mode == "all" or (mode == "unmapped" and c["type"] is None)]
    if todo:
        results = run_step(step, [step.ask(c) for c in todo], ctx, ctx.judges_for("classify")[0][1])
        for c, g in zip(todo, results):
            if g.ok:
                said = f" (the generator said {c['label']!r})" if c["type"] != g.payload["type"] else ""
                c["type"] = g.payload["type"]
                log.generated("classify", g, reason=f"type {c['type']}{said}")
            else:
                log.generated("classify", g, kept=c["type"] is not None,
                              reason=f"classification failed ({g.error}); " + (
                                  f"the generator's type {c['type']} stands" if c["type"] else "no question type"))
    out = []
    for c in cands:
        if c["type"] is None:
            if mode == "none":
                log.add("classify", c["item_id"], c["video_id"], kept=False,
                        reason=f"generator label {c['label']!r} is none of the ten types and --classify is {mode}")
            continue
        out.append(c)
    return out


def _filter(cands, ctx, log, args, official) -> tuple[list[dict], dict]:
    """Blind solvability, then dedup; returns the kept candidates and item_id -> blind accuracy."""
    from capeval.engine.judging.runner import run_judging  # deferred: the judge loop (asyncio, sqlite)

    if not cands:
        return [], {}
    items = pa.Table.from_pylist([{"benchmark": "capquiz", "task": normalize_type(c["type"]),
                                   "item_id": c["item_id"], "video_id": c["video_id"], "annotation": c["question"],
                                   "options": c["options"], "answer": c["answer"]} for c in cands], schema=ITEMS)
    right = {}
    if args.trials > 0:
        protocol = BlindProtocol(prompts=str(ctx.pack.path) if official else None)
        stats = ctx.stats.setdefault("blind", StepStats())
        for label, judge in ctx.judges_for("blind"):
            requests = protocol.requests(items, judge=judge.name, judge_revision=judge.revision, trials=args.trials)
            ctx.log(f"step blind: {requests.num_rows} requests to {label}")
            verdicts, summary = run_judging(requests, judge, cache_dir=ctx.cache_dir, protocol=protocol,
                                            progress=ctx.progress, return_summary=True,
                                            max_in_flight=ctx.max_in_flight)
            ctx.log(f"step blind ({label}): {summary}")
            stats.asks, stats.sent, stats.cached = stats.asks + requests.num_rows, stats.sent + summary.sent, \
                stats.cached + summary.cached
            stats.wall_s += summary.wall_s
            right[label] = blind_counts(verdicts)
            for v in verdicts.to_pylist():
                outcome = {CapQuizVerdict.CORRECT: "right", CapQuizVerdict.WRONG: "wrong"}.get(
                    v["verdict"], f"no answer ({v['error'] or v['detail']})")
                if v["verdict"] < 0:
                    stats.fail(v["error"] or v["detail"] or "no answer")
                log.add("blind", v["item_id"], v["video_id"], kept=None, request_key=v["request_key"],
                        trial=v["trial"], output={"judge": label, "reply": v["raw_output"], "parsed": v["detail"]},
                        reason=f"{label} trial {v['trial']}: {outcome}")
    mode = _dedup_mode(args)
    settings = FilterSettings(trials=max(args.trials, 1), min_correct=args.min_correct, dedup=mode == "embeddings",
                              question_threshold=args.dedup_threshold, answer_threshold=args.dedup_threshold)
    record = decide(items, right, settings, embed=_sentence_embeddings if mode == "embeddings" else None)
    rows = record.to_pylist()
    if mode == "llm":
        _llm_dedup(cands, rows, ctx, log, official)
    accuracy = {r["item_id"]: r["blind_accuracy"] for r in rows}
    kept = []
    for c, r in zip(cands, rows):
        step = "dedup" if r["duplicate_of"] else "blind"
        log.add(step, c["item_id"], c["video_id"], kept=r["kept"], reason=r["reason"],
                output={k: r[k] for k in ("blind_right", "blind_accuracy", "duplicate_of")})
        if r["kept"]:
            kept.append(c)
    return kept, accuracy


def _llm_dedup(cands, rows, ctx, log, official) -> None:
    """The paper's dedup: per video, the model groups the questions that survived the blind check; every cluster
    keeps its hardest question (lowest blind accuracy; the first on ties)."""
    step = DedupStep()
    by_video: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        if r["kept"]:
            by_video.setdefault(cands[i]["video_id"], []).append(i)
    groups = {vid: idx for vid, idx in by_video.items() if len(idx) > 1}
    asks = [step.ask(vid, [cands[i] for i in idx], official=official) for vid, idx in groups.items()]
    if not asks:
        return
    for g in run_step(step, asks, ctx, ctx.judges_for("dedup")[0][1]):
        idx = groups[g.ask.video_id]
        log.generated("dedup", g, kept=True, reason=None if g.ok else
                      f"dedup failed, the video's questions are kept as they are: {g.error}")
        if not g.ok:
            continue
        for cluster in g.payload["clusters"]:
            members = [idx[k] for k in cluster]
            if len(members) < 2:
                continue
            keep = min(members, key=lambda i: (rows[i]["blind_accuracy"] or 0.0, i))
            for i in members:
                if i != keep:
                    rows[i].update(kept=False, duplicate_of=cands[keep]["item_id"],
                                   reason=f"duplicate of {cands[keep]['item_id']!r} (the model grouped them; the "
                                          f"cluster keeps its hardest question)")


def _balance(kept: list[dict], args, log) -> list[dict]:
    if args.no_balance:
        return kept
    positions = balanced_positions(len(kept), args.n_options, args.seed)
    for c, pos in zip(kept, positions):
        before = c["options"].index(c["answer"])
        c["options"] = place_answer(c["options"], c["answer"], pos)
        log.add("balance", c["item_id"], c["video_id"], kept=True, output={"from": before, "to": pos},
                reason=f"answer moved from position {before} to {pos}" if before != pos else f"answer stays at {pos}")
    return kept


def _sentence_embeddings(texts: list[str]):
    return embedding_model().encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)


PIPELINE = CapQuizPipeline()
