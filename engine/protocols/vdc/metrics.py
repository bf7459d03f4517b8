"""VDC metrics: per caption kind, accuracy (share of questions judged 'yes') and score (mean 0-5), each first per
video and then averaged over videos; VDCscore, the mean of the five kinds' accuracies.

Readings (the `reading` column):

* official (official mode) -- AuroraCap's `post_eval/process_vdc_result.py` (one run per kind), on the score rows of
  each (captioner, prompt_id, frame_spec, judge trial) group, per video in question order (the item's
  `extra.qa_index`, else the number ending its item id):
  1. the first reply that ast.literal_eval or the QA dict's update rejected (error "official parse: ...";
     parsing.py) skips the video -- the official script stops asking there, capeval has asked every question
     (a cost only: those replies are not read); a question without a reply (backend error, failed caption or
     answer step) skips it too, as the script's `except Exception` would;
  2. else the first `float(qa['score'])` / `qa['pred']` that raised ("official scoring: ...") skips it;
  3. else tp_score = sum of float(score) / questions, tp_acc = 'yes' answers / questions (lines 253-260), and the
     video is kept only `if tp_score and tp_acc` (line 262): exactly 0 drops it from both means, nan is kept.
  Per kind: the means of the kept videos' tp_score and tp_acc (lines 269-270), summed in the order the script
  meets the videos (its raw file's: the captions' rows, then the items' order); none kept is the script's
  ZeroDivisionError: value null, with that reason, never a number -- also for a kind (of the items) that a caption
  group is judged on when none of its videos is in that kind's questions (each is skipped, line 221). `printed`
  holds the line the script prints ("Overall TP Accuracy: 0.59..."); Acc is that fraction x 100. A nan score stays
  nan, as printed. VDCscore (task "all") is derived: no official code computes it (the README figure's mean of the
  five per-kind accuracies, %); Score on that row is the mean of the five kinds' scores, derived too.
* lmms_eval (official mode, beside it) -- the port in lmms-eval's tasks/vdc/utils.py read on the same replies: a
  reply without 'pred' or 'score' drops that pair (not the video), scores are added raw (a string score raises),
  no zero filter, the mean is over every video; any exception in a video (literal_eval, a raw string score, no
  pair left) leaves `case_score` unbound and the UnboundLocalError aborts the whole lmms-eval run: value null with
  that reason. A complex score sums, then counts 0.0 (vdc_aggregate_score's float() fails).
* strict (strict mode) -- capeval's own: every video counts (no zero filter); a question without a verdict is left
  out of its video's means and counted in n_no_verdict; a video without any verdict is left out of the kind's mean.

Intervals: percentile bootstrap over videos (one resample of the videos shared by a group's five kinds, so the
VDCscore interval accounts for a video judged in several kinds), over the videos each mean averages.

VDCscore rows (task "all", every reading): for a caption group whose prompt id names no kind (judged on all five),
and, as the official harness captions each video once per kind, for each (captioner, frame_spec, trial) whose
captions come from exactly one kind-named prompt per kind: prompt_id is then those five ids joined by "+" in kind
order. Such a combination exists only where one table holds the five groups (`capeval judge`, `capeval score`); a
sweep computes each (captioner, prompt) cell alone. A kind without a result makes VDCscore null with the reason.

A table holding several datasets' or judges' verdicts (a sweep's, read back) is scored per dataset and judge, each
its own official run, with `dataset` / `judge` columns.

Counting columns: n (the videos the mean averages), n_no_verdict (score rows without a verdict), n_videos (videos
judged), n_kept / n_dropped_zero / n_skipped (the official reading's per-video outcomes); `printed` (above); `note`
(what a derived or lmms_eval row is).
`official_per_video` and `lmms_eval_per_video` return the per-video outcomes themselves.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from capeval.engine.schemas import ParseStatus
from capeval.kernels.bootstrap import cluster_bootstrap, percentile_ci

from .codes import VDCVerdict
from .kinds import KINDS, judged_kinds, kinds_named
from .parsing import LMMS_MARK, OFFICIAL_SCORING, lmms_from_error
from .prompts import check_mode

GROUP_COLUMNS = ["captioner", "prompt_id", "frame_spec"]
#: verdict columns that, when they vary in one table (a sweep's verdicts read back), split it into separate runs
SPLIT_COLUMNS = ("dataset", "judge")
ALL = "all"
METRICS = ("VDCscore", "Acc", "Score")
OFFICIAL, LMMS, STRICT = "official", "lmms_eval", "strict"
_OK = (int(ParseStatus.OK), int(ParseStatus.REPAIRED))
#: the exception that escapes the port's vdc_process_results_generic after any error inside a video
LMMS_ABORT = "UnboundLocalError: cannot access local variable 'case_score' where it is not associated with a value"
LMMS_NOTE = ("lmms-eval's port (tasks/vdc/utils.py) on the same replies: a reply without 'pred' or 'score' drops the "
             "pair, not the video; no zero filter; the mean is over every video; any error aborts its run")
DERIVED_NOTE = ("derived: the mean over the five kinds of their {what} (the README figure's VDCScore); no official "
                "code computes it")
#: why a mean is nan: float() takes the score text 'nan' (and an inf score can give inf - inf); nan is truthy, so the
#: official zero filter keeps such a video and its kind's mean is printed as nan
NAN_REASON = ("nan: a kept video's score is nan (float() of a score reply such as 'nan'; `if tp_score and tp_acc` "
              "keeps it), so the mean is nan, as the official script prints it")
STATUS_TEXT = {int(ParseStatus.FAILED): "the judge's answer could not be parsed",
               int(ParseStatus.ERROR): "the judge backend failed", int(ParseStatus.MISSING): "no judgment"}


# -- rows -> videos ----------------------------------------------------------------------------------------------


@dataclass
class Question:
    order: tuple
    ok: bool
    verdict: int
    detail: dict
    error: str | None


@dataclass
class Video:
    group: tuple  # GROUP_COLUMNS values + the trial
    kind: str
    video_id: str
    questions: list[Question] = field(default_factory=list)


def _question_order(item_id: str, extra_index: int | None, row: int) -> tuple:
    if extra_index is not None:
        return (0, int(extra_index), row)
    tail = str(item_id).rsplit("/", 1)[-1]
    return (0, int(tail), row) if tail.isdigit() else (1, 0, row)


def _qa_indexes(items: pl.DataFrame | None) -> dict[str, int]:
    if items is None or "extra" not in items.columns:
        return {}
    out = {}
    for item_id, extra in zip(items.get_column("item_id").to_list(), items.get_column("extra").to_list()):
        try:
            value = json.loads(extra) if extra else None
        except (TypeError, ValueError):
            continue
        if isinstance(value, dict) and isinstance(value.get("qa_index"), int):
            out[str(item_id)] = value["qa_index"]
    return out


def _prepare(verdicts: pl.DataFrame) -> pl.DataFrame:
    missing = [c for c in ("item_id", "video_id", "verdict", "task") if c not in verdicts.columns]
    if missing:
        raise KeyError(f"verdict table lacks columns {missing} (have {verdicts.columns})")
    v = verdicts.with_columns(
        [pl.col(c).cast(pl.String).fill_null("-") if c in verdicts.columns else pl.lit("-").alias(c)
         for c in GROUP_COLUMNS])
    trial = pl.col("trial") if "trial" in v.columns else (pl.col("seed") if "seed" in v.columns else None)
    v = v.with_columns((trial.cast(pl.String).fill_null("0") if trial is not None else pl.lit("0")).alias("_trial"))
    if "step" in v.columns:  # the answer step carries no verdict: its failures show as score rows without one
        v = v.filter(pl.col("step").is_null() | (pl.col("step") != "answer"))
    for c, dtype in (("parse_status", pl.Int8), ("error", pl.String), ("detail", pl.String)):
        if c not in v.columns:
            v = v.with_columns(pl.lit(None, dtype=dtype).alias(c))
    return v


def _column(frame: pl.DataFrame | None, name: str) -> list:
    return frame.get_column(name).to_list() if frame is not None and name in frame.columns else []


def videos_of(verdicts: pl.DataFrame, items: pl.DataFrame | None = None,
              captions: pl.DataFrame | None = None) -> list[Video]:
    """The score rows grouped per (group, trial, kind, video), questions in question order, videos in the order the
    official script meets them: its raw file's (the captions' rows), then the items' order, then the verdicts'."""
    v = _prepare(verdicts)
    qa_index = _qa_indexes(items)
    video_rank: dict[str, int] = {}
    for vid in _column(captions, "video_id") + _column(items, "video_id"):
        video_rank.setdefault(str(vid), len(video_rank))
    out: dict[tuple, Video] = {}
    cols = ["item_id", "video_id", "task", "verdict", "parse_status", "detail", "error", "_trial", *GROUP_COLUMNS]
    for i, r in enumerate(v.select(cols).iter_rows(named=True)):
        group = (*(r[c] for c in GROUP_COLUMNS), r["_trial"])
        key = (group, r["task"], r["video_id"])
        video = out.get(key)
        if video is None:
            video = out[key] = Video(group, r["task"], r["video_id"])
        ok = r["parse_status"] in _OK and r["detail"] is not None and r["verdict"] is not None and r["verdict"] >= 0
        try:
            detail = json.loads(r["detail"]) if ok else {}
        except ValueError:
            ok, detail = False, {}
        error = r["error"] if r["error"] else (None if ok else STATUS_TEXT.get(r["parse_status"], "no verdict"))
        video.questions.append(Question(_question_order(r["item_id"], qa_index.get(str(r["item_id"])), i), ok,
                                        int(r["verdict"]) if r["verdict"] is not None else -1, detail, error))
    for video in out.values():
        video.questions.sort(key=lambda q: q.order)
    first_seen = {key: n for n, key in enumerate(out)}
    return sorted(out.values(), key=lambda vd: (video_rank.get(vd.video_id, len(video_rank)),
                                                first_seen[(vd.group, vd.kind, vd.video_id)]))


# -- the official reading ----------------------------------------------------------------------------------------


@dataclass
class OfficialVideo:
    status: str  # counted | dropped_zero | skipped_error
    tp_score: float | None = None
    tp_acc: float | None = None
    error: str | None = None


def _without_tag(error: str) -> str:
    start = error.rfind(LMMS_MARK)
    return error[:start] if start >= 0 and error.endswith("]") else error


def official_video(video: Video) -> OfficialVideo:
    """The official script's outcome for one video (see the module docstring)."""
    failed = [q for q in video.questions if not q.ok]
    unread = [q for q in failed if not (q.error or "").startswith(OFFICIAL_SCORING)]
    first = (unread or failed or [None])[0]
    if first is not None:
        return OfficialVideo("skipped_error", error=_without_tag(first.error or "no verdict"))
    total_score, total_acc = 0, 0
    for q in video.questions:
        total_score += float(q.detail["score_float"])
        if q.detail.get("is_yes"):
            total_acc += 1
    n = len(video.questions)
    tp_score, tp_acc = total_score / n, total_acc / n
    return OfficialVideo("counted" if (tp_score and tp_acc) else "dropped_zero", tp_score, tp_acc)


def official_per_video(verdicts: pl.DataFrame, items: pl.DataFrame | None = None,
                       captions: pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per (group, trial, kind, video): status (counted | dropped_zero | skipped_error), tp_score, tp_acc,
    error, n_questions, in the order the official means add them. With `items` and `captions`, also a
    `not_in_qa_file` row for each caption judged on a kind whose questions (present in `items`) lack its video: the
    official script skips such a video silently (`if video_id in tp_gt_qa_dict`, line 221)."""
    rows = []
    videos = videos_of(verdicts, items, captions)
    for video in videos:
        o = official_video(video)
        rows.append({**dict(zip(GROUP_COLUMNS, video.group[:-1])), "trial": video.group[-1], "task": video.kind,
                     "video_id": video.video_id, "status": o.status, "tp_score": o.tp_score, "tp_acc": o.tp_acc,
                     "error": o.error, "n_questions": len(video.questions)})
    if items is not None and captions is not None and captions.height:
        trials = sorted({vd.group[-1] for vd in videos}) or ["0"]
        have = set(zip(items.get_column("task").to_list(), items.get_column("video_id").to_list()))
        loaded = {k for k, _ in have}
        for cap in captions.iter_rows(named=True):
            for kind in judged_kinds(cap.get("prompt_id")):
                if kind in loaded and (kind, cap["video_id"]) not in have:
                    labels = {c: "-" if cap.get(c) is None else str(cap.get(c)) for c in GROUP_COLUMNS}
                    rows += [{**labels, "trial": t, "task": kind, "video_id": cap["video_id"],
                              "status": "not_in_qa_file", "tp_score": None, "tp_acc": None, "error": None,
                              "n_questions": 0} for t in trials]
    return pl.DataFrame(rows, schema={**{c: pl.String for c in GROUP_COLUMNS}, "trial": pl.String, "task": pl.String,
                                      "video_id": pl.String, "status": pl.String, "tp_score": pl.Float64,
                                      "tp_acc": pl.Float64, "error": pl.String, "n_questions": pl.Int64})


# -- the lmms-eval port's reading --------------------------------------------------------------------------------


@dataclass
class LmmsVideo:
    score: float | None = None  # what vdc_aggregate_score adds (float(case_score), 0.0 when float() fails)
    acc: float | None = None
    pairs_kept: int = 0
    error: str | None = None  # the exception the port logs for the video ("Error for Video Name: ...")


def lmms_video(video: Video) -> LmmsVideo:
    """The port's llmms_eval() on one video's replies (see parsing.lmms_pair)."""
    kept = []
    for q in video.questions:
        if q.ok:
            pair = q.detail.get("lmms_eval") or {"error": "no lmms-eval reading stored with the verdict"}
        else:
            pair = lmms_from_error(q.error) or {"error": _without_tag(q.error or "no verdict").split(": ", 1)[-1]}
        if "error" in pair:
            return LmmsVideo(error=pair["error"])
        if pair["kept"]:
            kept.append(pair)
    total_type, total, complex_sum = "int", 0.0, False
    for pair in kept:  # total_score += score, in pair order
        score = pair["score"]
        if score["kind"] == "error":
            return LmmsVideo(error=score["error"], pairs_kept=len(kept))
        if score["kind"] == "other":
            return LmmsVideo(error=f"TypeError: unsupported operand type(s) for +=: '{total_type}' and "
                                   f"'{score['type']}'", pairs_kept=len(kept))
        if score["kind"] == "complex":
            complex_sum, total_type = True, "complex"
            continue
        total += float(score["value"])
        if score["type"] == "float" and total_type == "int":
            total_type = "float"
    if not kept:
        return LmmsVideo(error="ZeroDivisionError: division by zero")
    acc = sum(1 for p in kept if p["is_yes"]) / len(kept)
    # float(case_score) fails for a complex mean: vdc_aggregate_score's bare except counts 0.0
    return LmmsVideo(0.0 if complex_sum else total / len(kept), acc, len(kept))


def lmms_eval_per_video(verdicts: pl.DataFrame, items: pl.DataFrame | None = None,
                        captions: pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per (group, trial, kind, video): what lmms-eval's port gives the video (status ok | error, score,
    acc, pairs_kept, the error it logs)."""
    rows = []
    for video in videos_of(verdicts, items, captions):
        o = lmms_video(video)
        rows.append({**dict(zip(GROUP_COLUMNS, video.group[:-1])), "trial": video.group[-1], "task": video.kind,
                     "video_id": video.video_id, "status": "error" if o.error else "ok", "score": o.score,
                     "acc": o.acc, "pairs_kept": None if o.error else o.pairs_kept, "error": o.error})
    return pl.DataFrame(rows, schema={**{c: pl.String for c in GROUP_COLUMNS}, "trial": pl.String, "task": pl.String,
                                      "video_id": pl.String, "status": pl.String, "score": pl.Float64,
                                      "acc": pl.Float64, "pairs_kept": pl.Int64, "error": pl.String})


# -- per kind ----------------------------------------------------------------------------------------------------


@dataclass
class KindResult:
    """One reading of one kind in one group: the per-video values averaged (None: no number, with `reason`)."""

    score: float | None
    acc: float | None
    videos: list[str]  # the videos averaged, in order
    video_scores: list[float]
    video_accs: list[float]
    n: int  # score rows of the videos averaged
    n_no_verdict: int
    n_videos: int
    counts: dict = field(default_factory=dict)  # kept / dropped_zero / skipped (official reading)
    reason: str | None = None
    printed: tuple[str | None, str | None] = (None, None)  # (score line, accuracy line)


def _mean(values: list[float]) -> float:
    total = 0
    for x in values:  # summed in order, as the official sum() does
        total += x
    return total / len(values)


def _no_verdict(videos: list[Video]) -> int:
    return sum(1 for vd in videos for q in vd.questions if q.verdict < 0)


#: a kind a group's captions are judged on although none of their videos has its questions
NO_VIDEO_OF_KIND = ("ZeroDivisionError: {who} divides by zero: none of this caption group's videos is in the kind's "
                    "questions (each is skipped: `if video_id in tp_gt_qa_dict`, line 221)")


def official_kind(videos: list[Video]) -> KindResult:
    if not videos:
        return KindResult(None, None, [], [], [], 0, 0, 0, {"kept": 0, "dropped_zero": 0, "skipped": 0},
                          reason=NO_VIDEO_OF_KIND.format(who="the official script"))
    outcomes = [(vd, official_video(vd)) for vd in videos]
    kept = [(vd, o) for vd, o in outcomes if o.status == "counted"]
    counts = {"kept": len(kept), "dropped_zero": sum(o.status == "dropped_zero" for _, o in outcomes),
              "skipped": sum(o.status == "skipped_error" for _, o in outcomes)}
    base = dict(videos=[vd.video_id for vd, _ in kept], video_scores=[o.tp_score for _, o in kept],
                video_accs=[o.tp_acc for _, o in kept], n=len(kept),
                n_no_verdict=_no_verdict(videos), n_videos=len(videos), counts=counts)
    if not kept:
        reason = (f"ZeroDivisionError: the official script divides by zero (no overall line, no output file): none "
                  f"of the {len(videos)} videos was kept ({counts['skipped']} skipped for an error, "
                  f"{counts['dropped_zero']} dropped by `if tp_score and tp_acc`)")
        return KindResult(None, None, reason=reason, **base)
    score, acc = _mean(base["video_scores"]), _mean(base["video_accs"])
    return KindResult(score, acc, printed=(f"Overall TP Score: {score}", f"Overall TP Accuracy: {acc}"), **base)


def lmms_kind(videos: list[Video]) -> KindResult:
    if not videos:
        return KindResult(None, None, [], [], [], 0, 0, 0,
                          reason=NO_VIDEO_OF_KIND.format(who="the lmms-eval port's mean over no document"))
    outcomes = [(vd, lmms_video(vd)) for vd in videos]
    base = dict(n_no_verdict=_no_verdict(videos), n_videos=len(videos))
    failed = [(vd, o) for vd, o in outcomes if o.error]
    if failed:
        vd, o = failed[0]
        reason = (f"the lmms-eval port aborts the run: {LMMS_ABORT} (after 'Error for Video Name: {vd.video_id}: "
                  f"{o.error}'; {len(failed)} of {len(videos)} videos fail)")
        return KindResult(None, None, [], [], [], 0, reason=reason, **base)
    scores, accs = [o.score for _, o in outcomes], [o.acc for _, o in outcomes]
    score, acc = _mean(scores), _mean(accs)
    return KindResult(score, acc, [vd.video_id for vd, _ in outcomes], scores, accs, len(outcomes),
                      printed=(f"llmms_eval_score: {score}", f"llmms_eval_acc: {acc}"), **base)


def strict_kind(videos: list[Video]) -> KindResult:
    ids, scores, accs = [], [], []
    for vd in videos:
        answered = [q for q in vd.questions if q.ok]
        if not answered:
            continue
        ids.append(vd.video_id)
        scores.append(sum(float(q.detail["score"]) for q in answered) / len(answered))
        accs.append(sum(q.verdict == int(VDCVerdict.YES) for q in answered) / len(answered))
    base = dict(videos=ids, video_scores=scores, video_accs=accs, n=len(ids), n_no_verdict=_no_verdict(videos),
                n_videos=len(videos))
    if not ids:
        return KindResult(None, None, reason="no verdicts: no video of this kind has a judged question", **base)
    return KindResult(_mean(scores), _mean(accs), **base)


READERS = {OFFICIAL: official_kind, LMMS: lmms_kind, STRICT: strict_kind}


# -- intervals ---------------------------------------------------------------------------------------------------


def _intervals(results: dict[str, KindResult], n_resamples: int, seed: int, confidence: float) -> dict:
    """{(kind, metric): (low, high)} and {("all", metric): ...} from one video resample shared by the kinds."""
    kinds = [k for k in results if results[k].videos]
    if n_resamples <= 0 or not kinds:
        return {}
    videos = sorted({v for k in kinds for v in results[k].videos})
    index = {v: i for i, v in enumerate(videos)}
    sums = np.zeros((len(videos), len(kinds), 3))
    for j, k in enumerate(kinds):
        r = results[k]
        for v, s, a in zip(r.videos, r.video_scores, r.video_accs):
            sums[index[v], j] += (a, s, 1.0)
    every = len(kinds) == len(KINDS)

    def statistic(s):
        with np.errstate(invalid="ignore", divide="ignore"):
            acc = s[..., 0] / s[..., 2] * 100.0
            score = s[..., 1] / s[..., 2]
        parts = [acc, score]
        if every:
            parts += [acc.mean(-1, keepdims=True), score.mean(-1, keepdims=True)]
        return np.concatenate(parts, axis=-1)

    low, high = percentile_ci(cluster_bootstrap(sums, statistic, n_resamples, seed), confidence)
    out = {}
    for j, k in enumerate(kinds):
        out[(k, "Acc")] = (low[j], high[j])
        out[(k, "Score")] = (low[len(kinds) + j], high[len(kinds) + j])
    if every:
        out[(ALL, "VDCscore")] = (low[2 * len(kinds)], high[2 * len(kinds)])
        out[(ALL, "Score")] = (low[2 * len(kinds) + 1], high[2 * len(kinds) + 1])
    return out


# -- the table ---------------------------------------------------------------------------------------------------


def _kind_rows(labels: dict, reading: str, results: dict[str, KindResult], cis: dict) -> list[dict]:
    rows = []
    for kind in KINDS:
        r = results.get(kind)
        if r is None:
            continue
        common = {**labels, "task": kind, "reading": reading, "n": r.n, "n_no_verdict": r.n_no_verdict,
                  "n_videos": r.n_videos, "n_kept": r.counts.get("kept"),
                  "n_dropped_zero": r.counts.get("dropped_zero"), "n_skipped": r.counts.get("skipped"),
                  "reason": r.reason, "note": LMMS_NOTE if reading == LMMS else None}
        for metric, value, printed in (("Acc", None if r.acc is None else r.acc * 100.0, r.printed[1]),
                                       ("Score", r.score, r.printed[0])):
            low, high = cis.get((kind, metric), (None, None))
            reason = r.reason if r.reason is not None or value is None or value == value else NAN_REASON
            rows.append({**common, "metric": metric, "value": value, "ci_low": low, "ci_high": high,
                         "printed": printed, "reason": reason})
    return rows


def _derived_rows(labels: dict, reading: str, results: dict[str, KindResult], cis: dict) -> list[dict]:
    """VDCscore and the mean Score over the five kinds (task "all"), labelled derived; null with the reason when a
    kind has no result."""
    absent = [k for k in KINDS if k not in results]
    failed = [k for k in KINDS if k in results and results[k].acc is None]
    reason = None
    if absent:
        reason = f"needs all five kinds; not judged here: {', '.join(absent)}"
    elif failed:
        reason = "needs all five kinds; no result for: " + "; ".join(f"{k} ({results[k].reason})" for k in failed)
    rs = [results[k] for k in KINDS if k in results]
    common = {**labels, "task": ALL, "reading": reading, "n": sum(r.n for r in rs),
              "n_no_verdict": sum(r.n_no_verdict for r in rs), "n_videos": len({v for r in rs for v in r.videos}),
              "n_kept": None, "n_dropped_zero": None, "n_skipped": None, "printed": None}
    out = []
    for metric, what, value in (
            ("VDCscore", "accuracies, %", None if reason else sum(results[k].acc * 100.0 for k in KINDS) / len(KINDS)),
            ("Score", "scores", None if reason else sum(results[k].score for k in KINDS) / len(KINDS))):
        low, high = (None, None) if reason else cis.get((ALL, metric), (None, None))
        why = reason
        if why is None and value != value:
            nan_kinds = [k for k in KINDS if results[k].score != results[k].score]
            why = f"nan: the {', '.join(nan_kinds)} score is nan ({NAN_REASON})"
        out.append({**common, "metric": metric, "value": value, "ci_low": low, "ci_high": high, "reason": why,
                    "note": DERIVED_NOTE.format(what=what)})
    return out


def _combined_groups(videos: list[Video]) -> dict[tuple, dict[str, list[Video]]]:
    """Captions made once per kind with kind-named prompts, as the official harness makes them: per (captioner,
    frame_spec, trial), one prompt per kind -> {combined labels: {kind: videos}}; only where each of the five
    kinds has exactly one such prompt."""
    by_system: dict[tuple, dict[str, dict[str, list[Video]]]] = {}
    for vd in videos:
        captioner, prompt_id, frame_spec, trial = vd.group
        named = kinds_named(prompt_id)
        if len(named) != 1 or named[0] != vd.kind:
            continue
        by_system.setdefault((captioner, frame_spec, trial), {}).setdefault(vd.kind, {}).setdefault(
            prompt_id, []).append(vd)
    out = {}
    for (captioner, frame_spec, trial), kinds in by_system.items():
        if set(kinds) != set(KINDS) or any(len(prompts) != 1 for prompts in kinds.values()):
            continue
        prompt_ids = [next(iter(kinds[k])) for k in KINDS]
        out[(captioner, "+".join(prompt_ids), frame_spec, trial)] = {k: next(iter(kinds[k].values())) for k in KINDS}
    return out


def compute_metrics(verdicts: pl.DataFrame, *, items: pl.DataFrame | None = None,
                    captions: pl.DataFrame | None = None, n_resamples: int = 1000, seed: int = 0,
                    confidence: float = 0.95, mode: str | None = None, **options) -> pl.DataFrame:
    """Per (captioner, prompt_id, frame_spec[, dataset, judge, trial]) x reading: Acc and Score per kind, VDCscore
    and Score over the five kinds (task "all"). See the module docstring."""
    del options  # other protocol params (prompts, temperature) do not change the metrics
    split = [c for c in SPLIT_COLUMNS if c in verdicts.columns and verdicts.get_column(c).n_unique() > 1]
    if split:  # a run's verdicts of several datasets or judges: each is its own official run
        frames = []
        for key, part in verdicts.group_by(split, maintain_order=True):
            frame = compute_metrics(part, items=items, captions=captions, n_resamples=n_resamples, seed=seed,
                                    confidence=confidence, mode=mode)
            frames.append(frame.with_columns(pl.lit(None if v is None else str(v), dtype=pl.String).alias(c)
                                             for c, v in zip(split, key)))
        out = pl.concat(frames, how="diagonal_relaxed")
        return out.select(*GROUP_COLUMNS, *split, *[c for c in out.columns if c not in (*GROUP_COLUMNS, *split)])
    mode = check_mode(mode)
    videos = videos_of(verdicts, items, captions)
    if not videos:
        raise ValueError("vdc: the verdict table has no score rows to score")
    readings = (OFFICIAL, LMMS) if mode == "official" else (STRICT,)
    groups: dict[tuple, dict[str, list[Video]]] = {}
    for vd in videos:
        groups.setdefault(vd.group, {}).setdefault(vd.kind, []).append(vd)
    if mode == "official":
        _add_kinds_without_videos(groups, items, captions)
    own_kinds = {g: kinds_named(g[1]) for g in groups}
    rows = []
    for group, by_kind in groups.items():
        labels = {**dict(zip(GROUP_COLUMNS, group[:-1])), "trial": group[-1]}
        for reading in readings:
            results = {k: READERS[reading](vds) for k, vds in by_kind.items()}
            cis = _intervals({k: r for k, r in results.items() if r.acc is not None}, n_resamples, seed, confidence)
            rows += _kind_rows(labels, reading, results, cis)
            if not own_kinds[group]:  # a generic prompt is judged on every kind: its own VDCscore
                rows += _derived_rows(labels, reading, results, cis)
    for labels_key, by_kind in _combined_groups(videos).items():
        labels = {**dict(zip(GROUP_COLUMNS, labels_key[:-1])), "trial": labels_key[-1]}
        for reading in readings:
            results = {k: READERS[reading](vds) for k, vds in by_kind.items()}
            cis = _intervals({k: r for k, r in results.items() if r.acc is not None}, n_resamples, seed, confidence)
            rows += _derived_rows(labels, reading, results, cis)
    out = pl.DataFrame(rows, schema=_SCHEMA).with_columns(pl.lit(mode).alias("mode"))
    reading_order = {r: i for i, r in enumerate((OFFICIAL, LMMS, STRICT))}
    task_order = {t: i for i, t in enumerate((ALL, *KINDS))}
    metric_order = {m: i for i, m in enumerate(METRICS)}
    out = out.sort(by=[*GROUP_COLUMNS, "trial", pl.col("reading").replace_strict(reading_order, default=9),
                       pl.col("task").replace_strict(task_order, default=9),
                       pl.col("metric").replace_strict(metric_order, default=9)])
    if out.get_column("trial").n_unique() == 1:
        out = out.drop("trial")  # one judge trial: no column to tell trials apart
    return out.select([c for c in (*GROUP_COLUMNS, "trial", "task", "reading", "mode", *_VALUE_COLUMNS)
                       if c in out.columns])


def _add_kinds_without_videos(groups: dict, items: pl.DataFrame | None, captions: pl.DataFrame | None) -> None:
    """An empty entry for each kind (loaded in `items`) that a caption group is judged on but that has no score row
    because none of the group's videos is in its questions: the official run of that kind divides by zero."""
    loaded = set(_column(items, "task"))
    if not loaded or captions is None or captions.height == 0:
        return
    trials = sorted({g[-1] for g in groups}) or ["0"]
    for cap in captions.select([c for c in GROUP_COLUMNS if c in captions.columns]).unique().iter_rows(named=True):
        labels = tuple("-" if cap.get(c) is None else str(cap.get(c)) for c in GROUP_COLUMNS)
        for trial in trials:
            by_kind = groups.setdefault((*labels, trial), {})
            for kind in judged_kinds(labels[1]):
                if kind in loaded:
                    by_kind.setdefault(kind, [])


_VALUE_COLUMNS = ("metric", "value", "ci_low", "ci_high", "n", "n_no_verdict", "n_videos", "n_kept",
                  "n_dropped_zero", "n_skipped", "printed", "reason", "note")
_SCHEMA = {**{c: pl.String for c in GROUP_COLUMNS}, "trial": pl.String, "task": pl.String, "reading": pl.String,
           "metric": pl.String, "value": pl.Float64, "ci_low": pl.Float64, "ci_high": pl.Float64, "n": pl.Int64,
           "n_no_verdict": pl.Int64, "n_videos": pl.Int64, "n_kept": pl.Int64, "n_dropped_zero": pl.Int64,
           "n_skipped": pl.Int64, "printed": pl.String, "reason": pl.String, "note": pl.String}
