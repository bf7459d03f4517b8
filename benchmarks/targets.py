"""Each benchmark's targets, declared once: the figure, the bound it must meet, where the bound was set, and why a
`--quick` run cannot be held to it where it cannot.

A bench reads its declarations against its result dict: `verdicts(TARGETS, result)` gives one `Verdict` per target
(`met` is None when the figure is missing: its section did not run, failed, or does not exist yet), `as_json` the
additive `targets` list of `--json`, and `targets_table(verdicts, quick=...)` the plain-text table printed without
`--json` (ASCII, at most 100 columns). The older `targets_met` dicts some benches print are read from the same
declarations (`targets_met`: a target with a `met_key` is reported there under that key).

Adding a target: one more `Target` in its bench's tuple below. A figure that a future section will produce (a
`--scale` run, the vLLM-ceiling sections) is declared with the path it will be written under; until then its row
says "not run".
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Result = Mapping[str, Any]
Reader = Callable[[Result], "float | None"]
WIDTH = 100


def number(value: Any) -> float | None:
    """A figure as a float; None for anything else (a missing key, a failure note, a bool)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def at(*path: str | int) -> Reader:
    """A reader of the number at `path` in the result (dict keys, list indexes)."""
    def read(result: Result) -> float | None:
        node: Any = result
        for step in path:
            if isinstance(step, int) and isinstance(node, list) and -len(node) <= step < len(node):
                node = node[step]
            elif isinstance(step, str) and isinstance(node, Mapping) and step in node:
                node = node[step]
            else:
                return None
        return number(node)
    return read


def ratio(numerator: Reader, denominator: Reader) -> Reader:
    """numerator / denominator; None when either is missing or the denominator is 0."""
    def read(result: Result) -> float | None:
        a, b = numerator(result), denominator(result)
        return None if a is None or not b else a / b
    return read


@dataclass(frozen=True)
class Target:
    """One target. `bound` is a number, or read from the result where it depends on the run's arguments (adaptive's
    1 - alpha); `wanted` then names it. `quick_note` says why a `--quick` run cannot be held to it (None: it can)."""

    name: str
    read: Reader
    op: Literal[">=", "<="]
    bound: float | Reader
    source: str
    quick_note: str | None = None
    met_key: str | None = None
    wanted: str | None = None

    def bound_for(self, result: Result) -> float | None:
        return float(self.bound) if isinstance(self.bound, (int, float)) else self.bound(result)


@dataclass(frozen=True)
class Verdict:
    name: str
    target: str  # e.g. ">= 0.9"
    value: float | None
    met: bool | None  # None: the figure is missing
    quick_note: str | None

    def as_json(self) -> dict:
        return {"name": self.name, "target": self.target, "value": self.value, "met": self.met,
                "quick_note": self.quick_note}


def _shown(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if abs(value) < 1e5 else f"{value:,.0f}"


def verdict(target: Target, result: Result) -> Verdict:
    value, bound = target.read(result), target.bound_for(result)
    wanted = f"{target.op} {_shown(bound)}"
    if target.wanted:
        wanted += f" ({target.wanted})"
    if value is None or bound is None:
        met = None
    else:
        met = value >= bound if target.op == ">=" else value <= bound
    return Verdict(target.name, wanted, value, met, target.quick_note)


def verdicts(targets: Sequence[Target], result: Result) -> list[Verdict]:
    return [verdict(t, result) for t in targets]


def as_json(found: Sequence[Verdict]) -> list[dict]:
    return [v.as_json() for v in found]


def targets_met(targets: Sequence[Target], result: Result) -> dict[str, bool | None]:
    """The older `targets_met` dict: {met_key: met} for the targets that have one, in declaration order."""
    return {t.met_key: verdict(t, result).met for t in targets if t.met_key}


def targets_table(found: Sequence[Verdict], *, quick: bool) -> str:
    """The targets as a plain-text table: target, value, wanted, verdict. In a `--quick` run a target that such a run
    cannot be held to is marked `*N` and its reason printed below the table."""
    if not found:
        return "targets: none declared (this benchmark reports figures only)"
    name_w = min(max(len("target"), *(len(v.name) for v in found)), 46)
    want_w = min(max(len("wanted"), *(len(v.target) for v in found)), 24)
    head = f"{'target':<{name_w}}  {'value':>10}  {'wanted':<{want_w}}  verdict"
    lines = [head, "-" * min(WIDTH, len(head) + 10)]
    notes: list[str] = []  # each reason once, numbered in order of first use
    for v in found:
        state = "not run" if v.met is None else ("met" if v.met else "missed")
        if quick and v.quick_note:
            if v.quick_note not in notes:
                notes.append(v.quick_note)
            state += f" *{notes.index(v.quick_note) + 1}"
        name = v.name if len(v.name) <= name_w else v.name[: name_w - 2] + ".."
        lines.append(f"{name:<{name_w}}  {_shown(v.value):>10}  {v.target:<{want_w}}  {state}")
    for i, note in enumerate(notes, 1):
        lines += textwrap.wrap(f"not comparable at --quick: {note}", WIDTH, initial_indent=f"*{i} ",
                               subsequent_indent=" " * (len(str(i)) + 2))
    title = "targets" if not quick else ("targets (--quick run: a verdict marked *N cannot be compared, see below)"
                                          if notes else "targets (--quick run)")
    lines.insert(0, title)
    met = sum(v.met is True for v in found)
    missing = sum(v.met is None for v in found)
    lines.append(f"{met} of {len(found)} met" + (f", {missing} not run" if missing else ""))
    return "\n".join(lines)


def figures(label: str, values: Mapping[str, Any]) -> str:
    """`label: k=v, k=v, ...` for a result's plain numbers and strings (nested dicts and lists left to --json),
    wrapped to 100 columns."""
    parts = [f"{k}={_shown(v) if number(v) is not None and isinstance(v, float) else v}"
             for k, v in values.items() if not isinstance(v, (dict, list, tuple))]
    return "\n".join(textwrap.wrap(f"{label}: " + ", ".join(parts), WIDTH, subsequent_indent="    ",
                                    break_long_words=False, break_on_hyphens=False))


# ---- the declarations, one tuple per bench ----------------------------------------------------------------------

STREAMING_SHARE = Target(
    "streaming.share (of the 64-in-flight bound)", at("streaming", "share"), ">=", 0.95,
    "issue 30 (at 4,000 requests)",
    quick_note="3,000 rows, below the 4,000 requests the target is set at; fill and drain dominate",
    met_key="streaming_share>=0.95")
ENGINE_CPU = Target("overhead.engine_cpu_ms_per_request", at("overhead", "engine_cpu_ms_per_request"), "<=", 0.2,
                    "README.md", met_key="engine_cpu_ms_per_request<=0.2")
SCALE_RSS = Target("scale.peak_rss_mb (1M requests)", at("scale", "peak_rss_mb"), "<=", 1536, "README.md")
STREAMING_LOOP = (STREAMING_SHARE,)
STREAMING = STREAMING_LOOP + (ENGINE_CPU, SCALE_RSS)

HTTP = (
    Target("http.client_cpu_ms_per_request", at("http", "client_cpu_ms_per_request"), "<=", 0.35, "docs/bench.md",
           met_key="http_client_cpu_ms_per_request<=0.35"),
)

VLLM_JUDGE = (
    Target("vllm.speedup (grouped+cache vs shuffled)", at("vllm", "speedup"), ">=", 2, "docs/bench.md",
           met_key="vllm_grouped_speedup>=2"),
    Target("vllm.grouped_prefix_cache.cached_share", at("vllm", "grouped_prefix_cache", "cached_share"), ">=", 0.75,
           "docs/bench.md",
           quick_note="16 prompts can be served at most ~0.73 from a cache (cached_share_ceiling); the 96 prompts of"
                      " the full run allow 0.754",
           met_key="vllm_cached_share>=0.75"),
    # issue 30 item 1: capeval's vLLM judge on the sweep path against vLLM's own LLM.generate, same prompts
    Target("vllm_ceiling.requests_per_s_ratio", at("vllm_ceiling", "requests_per_s_ratio"), ">=", 0.9, "issue 30"),
    Target("vllm_ceiling.output_tokens_per_s_ratio", at("vllm_ceiling", "output_tokens_per_s_ratio"), ">=", 0.9,
           "issue 30"),
)

SWEEP_RATIO = Target("sweep.ratio (overlapped / staged)", at("sweep", "ratio"), "<=", 0.6, "docs/bench.md",
                     met_key="sweep_overlap_ratio<=0.6")


def _scale_rows(result: Result) -> list[Mapping[str, Any]]:
    rows = (result.get("scale") or {}).get("sizes") if isinstance(result.get("scale"), Mapping) else None
    return [r for r in rows or () if isinstance(r, Mapping)]


def _scale_min(field: str) -> Reader:
    def read(result: Result) -> float | None:
        values = [number(r.get(field)) for r in _scale_rows(result)]
        return None if not values or None in values else min(values)  # type: ignore[type-var]
    return read


def _scale_max(field: str) -> Reader:
    def read(result: Result) -> float | None:
        values = [number(r.get(field)) for r in _scale_rows(result)]
        return None if not values or None in values else max(values)  # type: ignore[type-var]
    return read


def _scale_growth(field: str) -> Reader:
    """(last size's value / first size's) - 1."""
    def read(result: Result) -> float | None:
        rows = _scale_rows(result)
        first, last = (number(rows[0].get(field)), number(rows[-1].get(field))) if len(rows) > 1 else (None, None)
        return None if first is None or last is None or not first else last / first - 1
    return read


def _scale_spread(field: str) -> Reader:
    """max / min - 1 over the sizes."""
    def read(result: Result) -> float | None:
        low, high = _scale_min(field)(result), _scale_max(field)(result)
        return None if low is None or high is None or not low else high / low - 1
    return read


def _files_per_1000_added(result: Result) -> float | None:
    """Files in the run folder added per 1,000 requests between the smallest and the largest size (the constant
    part cancels)."""
    rows = _scale_rows(result)
    if len(rows) < 2:
        return None
    f0, f1 = number(rows[0].get("files")), number(rows[-1].get("files"))
    r0, r1 = number(rows[0].get("requests")), number(rows[-1].get("requests"))
    if None in (f0, f1, r0, r1) or r1 == r0:
        return None
    return (f1 - f0) / ((r1 - r0) / 1000)  # type: ignore[operator]


# issue 30 item 4, `capeval bench sweep --scale`: section `scale`, `sizes` one row per size (25k, 50k, 100k
# requests) with `requests`, `share`, `peak_rss_mb`, `engine_cpu_ms_per_request`, `files`; `rerun_s` and `first_s`.
SCALE_QUICK = ("2,500-10,000 requests (full run: 25,000-100,000): the sweep's fixed costs (reading and checking the "
               "inputs, the window's fill, the last answers' lognormal tail, the metrics) weigh more; at 2,500 even a "
               "client with no overhead reaches ~0.83 of the bound (model_share)")
SWEEP = (
    SWEEP_RATIO,
    Target("scale.share (lowest over the sizes)", _scale_min("share"), ">=", 0.9, "issue 30", quick_note=SCALE_QUICK),
    Target("scale.peak_rss_mb (highest)", _scale_max("peak_rss_mb"), "<=", 1536, "issue 30"),
    Target("scale.peak_rss growth 25k -> 100k", _scale_growth("peak_rss_mb"), "<=", 0.10, "issue 30"),
    Target("scale.engine_cpu_ms_per_request spread", _scale_spread("engine_cpu_ms_per_request"), "<=", 0.20,
           "issue 30", quick_note=SCALE_QUICK),
    Target("scale.files added per 1,000 requests", _files_per_1000_added, "<=", 1, "issue 30"),
    Target("scale.rerun / first run", ratio(at("scale", "rerun_s"), at("scale", "first_s")), "<=", 0.05,
           "issue 30", quick_note=SCALE_QUICK),
)

JUDGE = STREAMING_LOOP + (ENGINE_CPU,) + HTTP + VLLM_JUDGE + (SWEEP_RATIO,)

CAPTION_SHARE_500 = Target("http.share (500+ clips)", at("http", "share"), ">=", 0.8, "issue 30 (500 clips)")
CAPTION = (
    Target("http.share (2,000+ clips)", at("http", "share"), ">=", 0.9, "issue 30 (2,000 clips)",
           quick_note="500 clips: filling and draining the window (~4 s) do not amortise; 0.8 is the target at "
                      "500 clips"),
    CAPTION_SHARE_500,
    # issue 30 item 1: capeval's vLLM captioner on the sweep path against vLLM's own LLM.generate, same prompts
    Target("vllm_ceiling.requests_per_s_ratio", at("vllm_ceiling", "requests_per_s_ratio"), ">=", 0.9, "issue 30"),
    Target("vllm_ceiling.output_tokens_per_s_ratio", at("vllm_ceiling", "output_tokens_per_s_ratio"), ">=", 0.9,
           "issue 30"),
)


def _frame_count_share(snap: bool) -> Reader:
    """speedup over decode-all / the speedup that frame counts allow (decode-all's frames / the frames decoded)."""
    base = ("keyframe_snap",) if snap else ()

    def read(result: Result) -> float | None:
        speedup = at(*base, "speedup_vs_all")(result)
        allowed = ratio(at(*base, "decode_all_frames_decoded_per_returned"),
                        at(*base, "frames_decoded_per_returned"))(result)
        return None if speedup is None or not allowed else speedup / allowed
    return read


DECODE_QUICK = ("a 60 s 320x180 clip (full run: 120 s 1280x720): each frame decodes so fast that opening and "
                "seeking weigh more, against decoding every frame")
DECODE = (
    Target("speedup_vs_all (exact uniform)", at("speedup_vs_all"), ">=", 10, "README.md", quick_note=DECODE_QUICK,
           met_key="speedup_vs_all"),
    Target("ratio_to_lower_bound (exact uniform)", at("ratio_to_lower_bound"), "<=", 1.5, "README.md",
           met_key="ratio_to_lower_bound"),
    Target("keyframe_snap.speedup_vs_all", at("keyframe_snap", "speedup_vs_all"), ">=", 10, "README.md",
           quick_note=DECODE_QUICK, met_key="speedup_vs_all_keyframe_snap"),
    Target("keyframe_snap.ratio_to_lower_bound", at("keyframe_snap", "ratio_to_lower_bound"), "<=", 1.5, "README.md",
           met_key="ratio_to_lower_bound_keyframe_snap"),
    Target("ray.scaling (2 workers vs 1)", at("ray", "scaling"), ">=", 1.7, "README.md",
           quick_note="4 videos of 10 s (full run: 12 of 30 s): pool start-up and the last video weigh more",
           met_key="ray_scaling"),
    Target("speedup_vs_all / frame-count bound", _frame_count_share(False), ">=", 0.8, "issue 30",
           quick_note=DECODE_QUICK),
)

KERNELS_QUICK = "100,000 verdicts and 1,000 resamples, a tenth of the workload the target is set for"
KERNELS = (
    Target("bootstrap.ours_s", at("bootstrap", "ours_s"), "<=", 1.0, "README.md", quick_note=KERNELS_QUICK,
           met_key="bootstrap_le_1s"),
    Target("bootstrap.speedup (vs scipy)", at("bootstrap", "speedup"), ">=", 50, "README.md",
           quick_note="scipy timed on 200 resamples and scaled: fixed costs weigh more than at 1,000",
           met_key="bootstrap_ge_50x_scipy"),
    Target("two_stage.ours_s", at("two_stage", "ours_s"), "<=", 1.0, "docs/statistics.md", quick_note=KERNELS_QUICK,
           met_key="two_stage_le_1s"),
    Target("aggregate.ours_s / copy_s", ratio(at("aggregate", "ours_s"), at("aggregate", "copy_s")), "<=", 3.0,
           "README.md", quick_note="millisecond timings of 100,000 rows: call overheads dominate",
           met_key="aggregate_within_3x_copy"),
    Target("aggregate.ours_groups_only_s / copy_s",
           ratio(at("aggregate", "ours_groups_only_s"), at("aggregate", "copy_s")), "<=", 3.0, "README.md",
           quick_note="millisecond timings of 100,000 rows: call overheads dominate",
           met_key="aggregate_groups_only_within_3x_copy"),
)


def _one_minus_alpha(result: Result) -> float | None:
    alpha = at("alpha")(result)
    return None if alpha is None else 1 - alpha


ADAPTIVE = (
    Target("agreement", at("agreement"), ">=", _one_minus_alpha, "docs/statistics.md", wanted="1 - alpha",
           met_key="agreement_ge_1_minus_alpha"),
    Target("coverage", at("coverage"), ">=", _one_minus_alpha, "docs/statistics.md", wanted="1 - alpha",
           met_key="coverage_ge_1_minus_alpha"),
    Target("requests_saved_share", at("requests_saved_share"), ">=", 0.40, "docs/statistics.md",
           met_key="requests_saved_ge_0.40"),
)

FRAMES = (
    Target("rows[0].share_of_raw_1080p (default size)", at("rows", 0, "share_of_raw_1080p"), "<=", 0.05,
           "README.md"),
)
