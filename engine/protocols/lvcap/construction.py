"""`capeval construct lvcap`: LVCap-Eval ground truth built from videos the way the paper builds it (§3.3-3.4, App. B):

  scenes     shots by PySceneDetect's content detector (engine/frames/scenes.py)
  captions   every shot captioned by a captioner backend (the paper: Tarsier2) (construction_shots.py)
  narrative  the shot captions of a video organised into scenes, one narrative per scene (gt/scene_narrative)
  events     each scene's events (gt/extract_events)
  qa         yes/no questions per scene, 10 by default (gt/scene_qa_generation)

The LLM steps run on any judge backend through the judging path (engine/construct/base.py: cached, resumable);
the steps are in construction_steps.py. The paper's human validation is not automated: the per-item record
(record.parquet) and the scenes/shots tables are what a reviewer reads.

Outputs: items.jsonl in the shape the lvcap protocol judges (`capeval judge --protocol lvcap`, sweeps' `items`
datasets): per scene its questions (task "scene"; annotation = the question, answer = yes/no, extra = scene,
scene_description, dimension, analysis, and the video's times) and per video one "events" item (annotation = JSON
list of every scene's events in order, answer = the scene narratives, the reference description). Every item's
extra carries the video's duration, n_scenes, shot_boundaries (the detected cuts) and, when the scenes have times
(strict mode), scene_boundaries, so breakdowns by duration and number of scenes work, and segmental captioning
(a `segmental` caption prompt in a sweep) follows each video's own scenes. scenes.parquet and shots.parquet hold one
row per scene and per shot.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from capeval.engine.construct.base import Ask, ConstructContext, RecordLog, run_step
from capeval.engine.construct.pipeline import ConstructionPipeline, PipelineResult
from capeval.engine.errors import UsageError
from capeval.engine.frames.scenes import DEFAULT_MIN_SHOT_S, DEFAULT_THRESHOLD
from capeval.engine.inputs.rows import pick, read_rows, text_value
from capeval.engine.packs import load_pack, resolve_pack
from capeval.engine.replies.fences import fence
from capeval.engine.schemas import ITEMS

from .construction_items import video_items
from .construction_shots import CaptionerSpec, caption_all, detect_all
from .construction_steps import EventsStep, NarrativeStep, QAStep

GT_PACK = Path(__file__).resolve().parent / "gt_pack.toml"
GT_IDS = ("gt/scene_narrative", "gt/extract_events", "gt/scene_qa_generation")
CAPTION_ID = "caption/shot"
VIDEO_SUFFIXES = {".mp4", ".mkv", ".webm", ".mov", ".avi", ".m4v", ".mpg", ".mpeg", ".ts"}
EVENTS_SCHEMA = json.dumps({"type": "array", "items": {"type": "string", "maxLength": 200}, "maxItems": 40})


def narrative_schema(n_shots: int) -> str:
    """Strict narratives under structured output: one object per scene (at most one scene per shot)."""
    shot = {"type": "integer", "minimum": 1, "maximum": n_shots}
    scene = {"type": "object", "properties": {"scene": {"type": "integer", "minimum": 1}, "first_shot": shot,
                                              "last_shot": shot,
                                              "narrative": {"type": "string", "maxLength": 2000}},
             "required": ["first_shot", "last_shot", "narrative"]}
    return json.dumps({"type": "array", "items": scene, "minItems": 1, "maxItems": n_shots})


def questions_schema(n: int) -> str:
    """Strict yes/no questions under structured output: the n asked for (the parser needs at least n)."""
    question = {"type": "object", "properties": {
        "dimension": {"type": "string", "maxLength": 40}, "question": {"type": "string", "maxLength": 400},
        "answer": {"type": "string", "enum": ["yes", "no"]}, "analysis": {"type": "string", "maxLength": 600}},
        "required": ["dimension", "question", "answer"]}
    return json.dumps({"type": "array", "items": question, "minItems": n, "maxItems": n})

EPILOG = """videos: --videos PATH (a video file, or a folder: every video file in it; video_id = the file name
without its extension), repeatable; or --input FILE (JSONL/CSV/Parquet: video_id, media_path[, category]).

examples:
  capeval construct lvcap --videos clips/ --judge local --out lvcap_gt/
  capeval construct lvcap --videos clips/ --captioner vllm --captioner-model Qwen/Qwen2.5-VL-7B-Instruct \\
      --judge openai --judge-model gpt-4.1 --out lvcap_gt/
  capeval construct lvcap --videos clips/ --mode official --prompts ../shared/protocols/lvcap.toml \\
      --judge openai --judge-model gemini-2.5-pro --step-judge events=openai@x --judge-option x:model=gpt-4.1 \\
      --out lvcap_gt/
  capeval judge --protocol lvcap --items lvcap_gt/items.jsonl --captions captions.jsonl --judge local --out v.parquet"""


class LVCapPipeline(ConstructionPipeline):
    name = "lvcap"
    summary = "LVCap-Eval ground truth from videos: shots, shot captions, scene narratives, events, scene yes/no QA"
    steps = ("scenes", "captions", "narrative", "events", "qa")
    local_steps = ("scenes", "captions")
    epilog = EPILOG

    def add_arguments(self, p) -> None:
        p.add_argument("--videos", action="append", default=[], type=Path, metavar="PATH",
                       help="a video file or a folder of videos (repeatable)")
        p.add_argument("--input", type=Path, default=None, help="videos as a table: video_id, media_path, [category]")
        p.add_argument("--limit", type=int, default=None, metavar="N", help="only the first N videos")
        p.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                       help=f"content detector threshold (mean HSV change per pixel, 0-255; default "
                            f"{DEFAULT_THRESHOLD:g}, PySceneDetect's)")
        p.add_argument("--min-shot", type=float, default=DEFAULT_MIN_SHOT_S, metavar="SECONDS",
                       help=f"shortest shot: cuts closer than this are merged (default {DEFAULT_MIN_SHOT_S:g})")
        p.add_argument("--captioner", default="local", help="captioner backend of the shots (default: local)")
        p.add_argument("--captioner-model", default=None, help="the captioner's model")
        p.add_argument("--captioner-option", action="append", default=[], metavar="KEY=VALUE",
                       help="captioner option (value parsed as JSON when it parses), repeatable")
        p.add_argument("--shot-frames", type=int, default=8, help="frames per shot sent to the captioner (default 8)")
        p.add_argument("--questions", type=int, default=10, help="yes/no questions per scene (default 10, as the "
                       "paper)")

    def pack(self, mode, prompts):
        if mode == "official":
            pack = resolve_pack("lvcap", prompts, mode="official", official_name="lvcap")
        else:
            pack = load_pack(prompts) if prompts else load_pack(GT_PACK)
        missing = [i for i in GT_IDS if not pack.has(i)]
        if missing:
            raise UsageError(f"construct lvcap: the pack {pack.path} has no prompt(s) {missing} (the LVCap-Eval "
                             f"pack, lvcap.toml, and capeval's engine/protocols/lvcap/gt_pack.toml have them)")
        return pack

    def check(self, args) -> None:
        import importlib.util

        if importlib.util.find_spec("scenedetect") is None:
            raise UsageError("construct lvcap needs PySceneDetect: pip install --no-deps 'scenedetect>=0.6' (its "
                             "cv2 comes from the opencv-python-headless already installed)")
        if not args.videos and args.input is None:
            raise UsageError("construct lvcap: give --videos PATH (file or folder) or --input FILE")
        for name, value, low in (("--limit", args.limit, 1), ("--shot-frames", args.shot_frames, 1),
                                 ("--questions", args.questions, 1)):
            if value is not None and value < low:
                raise UsageError(f"{name} must be at least {low}, got {value}")
        if not args.threshold > 0:
            raise UsageError(f"--threshold must be a positive number, got {args.threshold}")
        if not args.min_shot >= 0:
            raise UsageError(f"--min-shot must be >= 0 seconds, got {args.min_shot}")

    def run(self, args, ctx: ConstructContext) -> PipelineResult:
        official = ctx.mode == "official"
        videos = read_videos(args.videos, args.input, args.limit)
        log = RecordLog(self.name)
        shots = detect_all(videos, args.out, threshold=args.threshold, min_shot_s=args.min_shot, ctx=ctx, log=log)
        spec = CaptionerSpec(args.captioner, _captioner_params(args), load_pack(GT_PACK).prompt(CAPTION_ID).user,
                             args.shot_frames)
        captions = caption_all(videos, shots, spec, args.out, ctx, log)
        scenes = _narratives(videos, shots, captions, ctx, log, official)
        events = _events(scenes, ctx, log, official)
        questions = _questions(scenes, ctx, log, official, args.questions)
        items, scene_rows = build_items(videos, shots, scenes, events, questions, log, args.questions)
        shot_rows = [{"video_id": vid, "shot": i, "start": s.start, "end": s.end,
                      "caption": (captions.get(vid) or [None] * len(sl.shots))[i - 1]}
                     for vid, sl in shots.items() for i, s in enumerate(sl.shots, start=1)]
        n_scene_items = sum(1 for r in items if r["task"] == "scene")
        notes = [f"{len(videos)} videos -> {sum(len(s.shots) for s in shots.values())} shots -> "
                 f"{len(scene_rows)} scenes -> {n_scene_items} scene questions and "
                 f"{len(items) - n_scene_items} events items"]
        if official:
            notes.append("official mode: the paper's Prompt1 names no shots per scene, so scene times are unknown; "
                         "items carry the detected shot_boundaries only")
        return PipelineResult(pa.Table.from_pylist(items, schema=ITEMS), log, notes=notes,
                              tables={"scenes": pa.Table.from_pylist(scene_rows),
                                      "shots": pa.Table.from_pylist(shot_rows)})


def _captioner_params(args) -> dict:
    params: dict = {}
    for pair in args.captioner_option:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--captioner-option {pair!r}: expected KEY=VALUE")
        try:
            params[key] = json.loads(value)
        except json.JSONDecodeError:
            params[key] = value
    if args.captioner_model:
        params["model"] = args.captioner_model
    return params


def read_videos(paths: list[Path], table: Path | None, limit: int | None) -> list[dict]:
    """[{video_id, media_path, category}] from --videos files/folders and an --input table, in the order given."""
    found: list[dict] = []
    for path in paths:
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in VIDEO_SUFFIXES)
            if not files:
                raise UsageError(f"--videos {path}: no video files in this folder")
        elif path.is_file():
            files = [path]
        else:
            raise UsageError(f"--videos {path}: no such file or folder")
        found += [{"video_id": f.stem, "media_path": str(f.resolve()), "category": None} for f in files]
    if table is not None:
        for n, rec in read_rows(table):
            col, vid = pick(rec, ("video_id", "file_id"))
            if col is None:
                raise UsageError(f"{table}: row {n}: needs video_id (have {sorted(rec)})")
            media = text_value(rec.get("media_path"), table, n, "media_path", required=True)
            media = media if Path(media).is_absolute() else str((table.parent / media).resolve())
            found.append({"video_id": text_value(vid, table, n, col, required=True, id_like=True),
                          "media_path": media,
                          "category": text_value(rec.get("category"), table, n, "category", required=False)})
    seen: set[str] = set()
    for v in found:
        if v["video_id"] in seen:
            raise UsageError(f"video_id {v['video_id']!r} given twice (two files with the same name?)")
        seen.add(v["video_id"])
    return found[:limit] if limit else found


def _reply(official: bool) -> dict:
    """What every ask of a mode shares: official sends no sampling parameters (none published)."""
    return {"temperature": None} if official else {"temperature": 0.0}


def _narratives(videos, shots, captions, ctx, log, official) -> dict[str, list[dict]]:
    asks = []
    for v in videos:
        vid = v["video_id"]
        texts = captions.get(vid)
        if texts is None:
            continue
        if any(t is None for t in texts):
            log.add("narrative", vid, vid, kept=False, reason=f"not asked: shot {texts.index(None) + 1} has no "
                    "caption")
            continue
        shot_list = [{"shot": i, "start": s.start, "end": s.end, "caption": t}
                     for i, (s, t) in enumerate(zip(shots[vid].shots, texts), start=1)]
        lines = "\n".join(f"Shot {s['shot']} [{s['start']:.2f}-{s['end']:.2f} s]: {s['caption']}" for s in shot_list)
        asks.append(Ask(vid, vid, GT_IDS[0], task="gt", max_tokens=4096, **_reply(official),
                        fields={"video_id": vid, "n_shots": len(shot_list), "shots": fence("shots", lines)},
                        appendix=lines if official else None,
                        json_schema=None if official else narrative_schema(len(shot_list)),
                        backend_fields={"shots": json.dumps(shot_list), "reply_format": _format(official)},
                        context={"mode": ctx.mode, "n_shots": len(shot_list)}))
    out: dict[str, list[dict]] = {}
    for g in run_step(NarrativeStep(), asks, ctx, ctx.judges_for("narrative")[0][1]):
        vid = g.ask.video_id
        if not g.ok:
            log.generated("narrative", g)
            continue
        sl = shots[vid].shots
        scenes = []
        for s in g.payload:
            timed = "first_shot" in s
            scenes.append({**s, "start": sl[s["first_shot"] - 1].start if timed else None,
                           "end": sl[s["last_shot"] - 1].end if timed else None})
        out[vid] = scenes
        log.generated("narrative", g, reason=f"{len(scenes)} scenes")
    return out


def _format(official: bool) -> str:
    return "paper" if official else "strict"


def _events(scenes, ctx, log, official) -> dict[tuple[str, int], list[str]]:
    asks = []
    for vid, video_scenes in scenes.items():
        for s in video_scenes:
            text = s["narrative"]
            asks.append(Ask(f"{vid}/scene{s['scene']}", vid, GT_IDS[1], task="gt", max_tokens=1024,
                            fields={"narrative": fence("scene", text)}, **_reply(official),
                            appendix=f"Input text:\n{text}" if official else None,
                            json_schema=None if official else EVENTS_SCHEMA,
                            backend_fields={"narrative": text, "reply_format": _format(official)},
                            context={"mode": ctx.mode, "scene": s["scene"]}))
    out = {}
    for g in run_step(EventsStep(), asks, ctx, ctx.judges_for("events")[0][1]):
        if g.ok:
            out[(g.ask.video_id, g.ask.context["scene"])] = g.payload
        log.generated("events", g, reason=f"{len(g.payload)} events" if g.ok else None)
    return out


def _questions(scenes, ctx, log, official, n) -> dict[tuple[str, int], list[dict]]:
    asks = []
    for vid, video_scenes in scenes.items():
        if official:  # Prompt3: every scene of the video in one ask
            text = "\n\n".join(f"Scene {s['scene']}:\n{s['narrative']}" for s in video_scenes)
            asks.append(Ask(vid, vid, GT_IDS[2], task="gt", max_tokens=8192, appendix=text, **_reply(official),
                            backend_fields={"scenes": json.dumps([{"scene": s["scene"], "narrative": s["narrative"]}
                                                                  for s in video_scenes]),
                                            "n_questions": str(n), "reply_format": "paper"},
                            context={"mode": ctx.mode, "n_scenes": len(video_scenes)}))
            continue
        for s in video_scenes:
            asks.append(Ask(f"{vid}/scene{s['scene']}", vid, GT_IDS[2], task="gt", max_tokens=4096,
                            fields={"scene": s["scene"], "narrative": fence("scene", s["narrative"]),
                                    "n_questions": n}, **_reply(official), json_schema=questions_schema(n),
                            backend_fields={"narrative": s["narrative"], "n_questions": str(n),
                                            "reply_format": "strict"},
                            context={"mode": ctx.mode, "n_questions": n, "scene": s["scene"]}))
    out = {}
    for g in run_step(QAStep(), asks, ctx, ctx.judges_for("qa")[0][1]):
        if not g.ok:
            log.generated("qa", g)
            continue
        per_scene = g.payload if official else {str(g.ask.context["scene"]): g.payload}
        for scene, qs in per_scene.items():
            out[(g.ask.video_id, int(scene))] = qs
        log.generated("qa", g, reason=f"{sum(len(q) for q in per_scene.values())} questions for "
                      f"{len(per_scene)} scene(s)")
    return out


def build_items(videos, shots, scenes, events, questions, log: RecordLog,
                n_questions: int | None = None) -> tuple[list[dict], list[dict]]:
    """ITEMS rows (scene questions, one events item per video) and one row per scene; what is left out and why
    goes to the record."""
    items, scene_rows = [], []
    for v in videos:
        vid = v["video_id"]
        if vid not in scenes:
            continue
        got_items, got_scenes = video_items(v, shots[vid], scenes[vid], events, questions, log, n_questions)
        items += got_items
        scene_rows += got_scenes
    return items, scene_rows


PIPELINE = LVCapPipeline()
