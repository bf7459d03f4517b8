"""`capeval construct vcinspector`: VC-Inspector's synthetic captions of controlled quality (arXiv 2509.16538, §4.1
and Appendix A; the official generator src/gen_data/augmentation.py).

For each ground-truth caption (--source: video_id, caption, optional media_path / item_id):
  1. extract_objects, extract_actions: the LLM lists the caption's objects O and actions A;
  2. plan (local, seeded): per variant (obj | act | obj_act) and sample, K ~ Unif{0..|O|} objects and
     L ~ Unif{0..|A|} actions to replace (engine/protocols/vcinspector/augment.py);
  3. new_object, new_action: an alternative for every element some sample replaces;
  4. substitute: the replacements applied one after the other, objects first (each on the caption the previous one
     produced); strict mode replaces an element that occurs as written itself and asks the LLM only otherwise;
  5. score (local): score = 1 - k/n with n = |O| + |A|, label = 1 + floor(4 * score), and the explanation naming the
     wrong (new) objects and actions; identical pseudo captions of one caption and variant are kept once.

Outputs in --out: items.jsonl (ITEMS: one item "<video>/<candidate>" per pseudo caption, label as category, the
plan in extra), captions.parquet (item_id, caption: `capeval judge --captions`), labels.parquet (video_id,
candidate_index, label, quality, ...: `capeval align --scores labels.parquet --column label`), finetune.jsonl (chat
records: video + caption + the protocol's scoring prompt -> "label\\n\\nexplanation"), record.parquet and
construct.json. Every LLM step goes through the judgment cache: a rerun, or a killed run started again, sends only
what is not in it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from capeval.engine import schemas
from capeval.engine.construct.base import ConstructContext, RecordLog, run_step
from capeval.engine.construct.outputs import replace_text
from capeval.engine.construct.pipeline import ConstructionPipeline, PipelineResult
from capeval.engine.protocols.vcinspector.construction_steps import (EXTRACT, REPLACE, STEPS, SUBSTITUTE, AugmentStep, extract_ask,
                                                replace_ask, substitute_ask)
from capeval.engine.errors import UsageError
from capeval.engine.inputs.rows import read_rows, text_value
from capeval.engine.packs import PackError, PromptPack, load_pack, resolve_pack
from capeval.engine.protocols.vcinspector import augment
from capeval.engine.protocols.vcinspector.prompts import pack_for

AUGMENT_PACK = Path(augment.__file__).with_name("augment_pack.toml")
DEFAULT_VARIANTS = {"official": augment.VARIANTS, "strict": ("obj_act",)}
VIDEO_TAG = "<video>"  # the fine-tuning records reference the video; trainers expand the tag into its frames
CAPTIONER = "vcinspector-synthetic"
OFFICIAL_PROMPTS = ("augment/extract_objects", "augment/extract_actions", "augment/new_object",
                    "augment/new_action", "augment/substitute", "judge/score", "paper/A.6_finetune")


@dataclass
class Source:
    source_id: str
    video_id: str
    caption: str
    media_path: str | None = None
    elements: dict = field(default_factory=dict)  # "objects"/"actions" -> extracted list (None: extraction failed)


@dataclass
class Candidate:
    source: Source
    sample_index: int
    plan: augment.Sample
    pairs: list = field(default_factory=list)  # [(kind, old, new_raw)] in substitution order
    caption: str = ""
    dropped: str | None = None

    @property
    def cid(self) -> str:
        return f"{self.source.source_id}#{self.plan.variant}#{self.sample_index}"


def read_sources(path: Path, limit: int | None) -> list[Source]:
    out, ids = [], set()
    for n, rec in read_rows(path):
        video = text_value(rec.get("video_id"), path, n, "video_id", required="media_path" not in rec, id_like=True)
        media = text_value(rec.get("media_path"), path, n, "media_path", required=False)
        column = "caption" if "caption" in rec else "text"
        caption = text_value(rec.get(column), path, n, column, required=True)
        video = video or media
        sid = text_value(rec.get("item_id"), path, n, "item_id", required=False, id_like=True) or video
        if sid in ids:
            sid = f"{video}#{n}"  # several ground-truth captions of one video: told apart by their row
        if sid in ids:
            raise UsageError(f"{path}:{n}: source id {sid!r} occurs twice; give distinct item_id values")
        ids.add(sid)
        out.append(Source(sid, video, caption, media))
        if limit is not None and len(out) >= limit:
            break
    if not out:
        raise UsageError(f"{path}: no captions")
    return out


class VCInspectorPipeline(ConstructionPipeline):
    name = "vcinspector"
    summary = "VC-Inspector: pseudo captions with k of n objects/actions replaced, labelled 1-5, with explanations"
    steps = STEPS
    epilog = """examples:
  capeval construct vcinspector --source gt_captions.jsonl --judge openai --judge-model MODEL --out vci/
  capeval construct vcinspector --mode official --prompts ../shared/protocols/vcinspector.toml \\
      --source gt.jsonl --judge vllm --judge-model Qwen/Qwen3-32B --out vci-official/
  then: capeval judge --protocol vcinspector --items vci/items.jsonl --captions vci/captions.parquet ...
        capeval align --ratings HUMAN.csv --scores vci/labels.parquet --column label"""

    def add_arguments(self, parser) -> None:
        parser.add_argument("--source", required=True, type=Path,
                            help="ground-truth captions: JSONL/CSV/Parquet with video_id, caption (optional "
                                 "media_path, item_id)")
        parser.add_argument("--samples", type=int, default=10,
                            help="pseudo captions drawn per caption and variant (official default 10)")
        parser.add_argument("--variants", default=None,
                            help="comma-separated obj, act, obj_act (default: official all three, strict obj_act)")
        parser.add_argument("--seed", type=int, default=0, help="seed of the replacement draws")
        parser.add_argument("--limit", type=int, default=None, help="first N source captions only")

    def check(self, args) -> None:
        if not Path(args.source).is_file():
            raise UsageError(f"--source {args.source}: no such file")
        if args.samples < 1:
            raise UsageError(f"--samples must be at least 1, got {args.samples}")
        if args.limit is not None and args.limit < 1:
            raise UsageError(f"--limit must be at least 1, got {args.limit}")
        self.variants(args)

    def variants(self, args) -> tuple[str, ...]:
        if not args.variants:
            return DEFAULT_VARIANTS[args.mode]
        chosen = tuple(dict.fromkeys(v.strip() for v in args.variants.split(",") if v.strip()))
        bad = [v for v in chosen if v not in augment.VARIANTS]
        if bad or not chosen:
            raise UsageError(f"--variants {args.variants!r}: choose from {', '.join(augment.VARIANTS)}")
        return chosen

    def pack(self, mode: str, prompts: str | None) -> PromptPack:
        try:
            if mode == "official":
                pack = resolve_pack("vcinspector", prompts, mode="official", official_name="vcinspector")
                missing = [p for p in OFFICIAL_PROMPTS if not pack.has(p)]
                if missing:
                    raise UsageError(f"{pack.path}: not VC-Inspector's official pack (no prompt {missing})")
                return pack
            return load_pack(prompts or AUGMENT_PACK)
        except PackError as exc:
            raise UsageError(str(exc)) from None

    # ---- the chain -------------------------------------------------------------------------------------------

    def run(self, args, ctx: ConstructContext) -> PipelineResult:
        sources = read_sources(Path(args.source), args.limit)
        log = RecordLog(self.name)
        steps = {name: AugmentStep(name, ctx.mode) for name in STEPS}
        self._extract(sources, steps, ctx, log)
        candidates = self._plan(sources, self.variants(args), args.seed, args.samples, log)
        self._replacements(candidates, steps, ctx, log)
        self._substitute(candidates, steps[SUBSTITUTE], ctx, log)
        kept = self._keep(candidates, log)
        return self._outputs(kept, sources, ctx, log, Path(args.out))

    @staticmethod
    def _judge(ctx: ConstructContext, step: str):
        return ctx.judges_for(step)[0][1]  # one judge per step: the first label given for it

    def _extract(self, sources, steps, ctx, log) -> None:
        for kind, name in EXTRACT.items():
            asks = [extract_ask(kind, ctx.mode, s.source_id, s.video_id, s.caption) for s in sources]
            for s, g in zip(sources, run_step(steps[name], asks, ctx, self._judge(ctx, name))):
                log.generated(name, g)
                s.elements[kind] = g.payload["elements"] if g.ok else None

    def _plan(self, sources, variants, seed, samples, log) -> list[Candidate]:
        out = []
        for s in sources:
            if s.elements.get("objects") is None or s.elements.get("actions") is None:
                log.add("plan", s.source_id, s.video_id, kept=False, reason="extraction failed: no pseudo captions")
                continue
            m, n = len(s.elements["objects"]), len(s.elements["actions"])
            if m + n == 0:
                log.add("plan", s.source_id, s.video_id, kept=False,
                        reason="no objects or actions extracted: nothing to replace and the score 1 - k/n is "
                               "undefined for n = 0")
                continue
            for variant in variants:
                for i in range(samples):
                    plan = augment.draw_sample(m, n, variant, augment.sample_rng(seed, s.source_id, variant, i))
                    c = Candidate(s, i, plan, caption=s.caption)
                    out.append(c)
                    log.add("plan", c.cid, s.video_id, kept=True, reason=f"replace {plan.n_replaced} of {m + n}",
                            output={"objects": [s.elements["objects"][j] for j in plan.objects],
                                    "actions": [s.elements["actions"][j] for j in plan.actions]})
        return out

    def _replacements(self, candidates, steps, ctx, log) -> None:
        for kind, name in REPLACE.items():
            wanted: dict[tuple[str, int], Source] = {}
            for c in candidates:
                for j in (c.plan.objects if kind == "objects" else c.plan.actions):
                    wanted.setdefault((c.source.source_id, j), c.source)
            keys = sorted(wanted)
            asks = [replace_ask(kind, ctx.mode, sid, wanted[sid, j].video_id, j, wanted[sid, j].elements[kind][j])
                    for sid, j in keys]
            got = dict(zip(keys, run_step(steps[name], asks, ctx, self._judge(ctx, name)) if asks else []))
            for g in got.values():
                log.generated(name, g)
            for c in candidates:
                for j in (c.plan.objects if kind == "objects" else c.plan.actions):
                    g = got[(c.source.source_id, j)]
                    if not g.ok and c.dropped is None:
                        c.dropped = f"no alternative for {kind[:-1]} {c.source.elements[kind][j]!r}: {g.error}"
                    elif g.ok:
                        c.pairs.append((kind, c.source.elements[kind][j], g.payload["raw"]))
        for c in candidates:  # objects first, then actions, as the official generator substitutes them
            c.pairs.sort(key=lambda p: p[0] != "objects")

    def _substitute(self, candidates, step, ctx, log) -> None:
        rounds = max((len(c.pairs) for c in candidates), default=0)
        for r in range(rounds):
            asks, waiting = [], []
            for c in candidates:
                if c.dropped is not None or r >= len(c.pairs):
                    continue
                kind, old, new = c.pairs[r]
                literal = augment.replace_literal(c.caption, old, new) if ctx.mode == "strict" else None
                if literal is not None and literal != c.caption:
                    log.add(SUBSTITUTE, c.cid, c.source.video_id, kept=True, reason="replaced as written, no LLM",
                            output={"round": r, "old": old, "new": new.strip(), "caption": literal})
                    c.caption = literal
                    continue
                asks.append(substitute_ask(ctx.mode, c.cid, c.source.video_id, r, c.caption, old, new))
                waiting.append(c)
            if not asks:
                continue
            for c, g in zip(waiting, run_step(step, asks, ctx, self._judge(ctx, SUBSTITUTE))):
                log.generated(SUBSTITUTE, g, item_id=c.cid)
                if g.ok:
                    c.caption = g.payload["caption"]
                else:
                    c.dropped = f"substitution {r} failed: {g.error}"

    def _keep(self, candidates, log) -> list[Candidate]:
        kept, seen = [], {}
        for c in candidates:
            if c.dropped is not None:
                log.add("score", c.cid, c.source.video_id, kept=False, reason=c.dropped)
                continue
            key = (c.source.source_id, c.plan.variant, c.caption)
            if key in seen:  # the official generator keeps each pseudo caption of a variant once
                log.add("score", c.cid, c.source.video_id, kept=False, reason=f"same caption as {seen[key]}")
                continue
            seen[key] = c.cid
            kept.append(c)
        return kept

    # ---- outputs ---------------------------------------------------------------------------------------------

    def _explanations(self, ctx) -> augment.ExplanationTemplates:
        own = {e["id"]: e["text"] for e in load_pack(AUGMENT_PACK).table("explanation")}
        if ctx.mode == "official":
            return augment.templates_from_finetune_prompt(ctx.pack.prompt("paper/A.6_finetune").user, own["none"])
        mine = {e.get("id"): e.get("text") for e in ctx.pack.table("explanation")} or own
        return augment.ExplanationTemplates(**{k: mine.get(k) or own[k] for k in ("none", "objects", "actions",
                                                                                   "both")})

    def _outputs(self, kept, sources, ctx, log, out_dir: Path) -> PipelineResult:
        templates = self._explanations(ctx)
        score_pack = ctx.pack if ctx.mode == "official" else pack_for("strict")
        next_index: dict[str, int] = {}
        items, captions, labels, records = [], [], [], []
        for c in kept:
            s = c.source
            m, n = len(s.elements["objects"]), len(s.elements["actions"])
            k = c.plan.n_replaced
            quality, label = augment.quality_score(k, m + n), augment.quality_label(k, m + n)
            wrong = {kind: [new.strip() for kd, _, new in c.pairs if kd == kind] for kind in ("objects", "actions")}
            explanation = templates.explain(wrong["objects"], wrong["actions"])
            index = next_index.get(s.video_id, 0)
            next_index[s.video_id] = index + 1
            item_id = f"{s.video_id}/{index}"
            replaced = [{"kind": kd, "old": old, "new": new.strip()} for kd, old, new in c.pairs]
            extra = {"candidate_index": index, "source_id": s.source_id, "variant": c.plan.variant,
                     "sample": c.sample_index, "n_objects": m, "n_actions": n, "n_replaced": k,
                     "quality": float(quality), "label": label, "replaced": replaced, "explanation": explanation,
                     "reference": s.caption}
            items.append({"benchmark": "vcinspector", "task": "default", "item_id": item_id, "video_id": s.video_id,
                          "media_path": s.media_path, "media_type": "video", "category": str(label),
                          "extra": json.dumps(extra, ensure_ascii=False)})
            captions.append({"item_id": item_id, "caption": c.caption, "captioner": CAPTIONER,
                             "prompt_id": c.plan.variant})
            labels.append({"video_id": s.video_id, "candidate_index": index, "item_id": item_id,
                           "source_id": s.source_id, "variant": c.plan.variant, "n_objects": m, "n_actions": n,
                           "n_replaced": k, "quality": float(quality), "label": label, "caption": c.caption,
                           "explanation": explanation, "reference": s.caption})
            _, user = score_pack.render("judge/score", image_tags=VIDEO_TAG, caption=c.caption)
            records.append(augment.chat_record(item_id, user, augment.finetune_target(label, explanation),
                                               s.media_path))
            log.add("score", c.cid, s.video_id, kept=True, reason=f"label {label} ({k} of {m + n} replaced)",
                    output={"item_id": item_id, "caption": c.caption, "label": label, "quality": float(quality),
                            "explanation": explanation})
        out_dir.mkdir(parents=True, exist_ok=True)
        replace_text(out_dir / "finetune.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
        table = pa.Table.from_pylist(items) if items else schemas.ITEMS.empty_table()
        notes = [f"{len(kept)} pseudo captions from {len(sources)} ground-truth captions; labels "
                 + ", ".join(f"{v}: {sum(r['label'] == v for r in labels)}" for v in range(5, 0, -1)),
                 f"fine-tuning records: {out_dir / 'finetune.jsonl'}"]
        return PipelineResult(items=schemas.conform(table, schemas.ITEMS), record=log, notes=notes,
                              tables={"captions": _captions_table(captions), "labels": _labels_table(labels)})


def _captions_table(rows: list[dict]) -> pa.Table:
    schema = pa.schema([("item_id", pa.string()), ("caption", pa.string()), ("captioner", pa.string()),
                        ("prompt_id", pa.string())])
    return pa.Table.from_pylist(rows, schema=schema)


def _labels_table(rows: list[dict]) -> pa.Table:
    schema = pa.schema([("video_id", pa.string()), ("candidate_index", pa.int64()), ("item_id", pa.string()),
                        ("source_id", pa.string()), ("variant", pa.string()), ("n_objects", pa.int32()),
                        ("n_actions", pa.int32()), ("n_replaced", pa.int32()), ("quality", pa.float64()),
                        ("label", pa.int32()), ("caption", pa.string()), ("explanation", pa.string()),
                        ("reference", pa.string())])
    return pa.Table.from_pylist(rows, schema=schema)


PIPELINE = VCInspectorPipeline()
