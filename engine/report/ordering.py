"""The order systems are shown and compared in: frame specs by their frame count, everything else as text.

As text, `uniform:16` sorts before `uniform:4`; people read frame specs as counts. A spec with a fixed count
(`uniform:N`, `linspace:N`, `interior:N`, `vllm:N`, any with `,snap=key`) sorts by N (vllm's nominal N); specs without one (`fps:0.4`, `segments:...`,
`file` for captions read from files) come after them, in text order. `capeval compare` orders each pair by this
key (a is the system that sorts first), so a − b reads the same way for every judge; the report's plots order
their axes, series and legends by it.
"""

from __future__ import annotations

from capeval.engine.frames.sampling import FrameSpec, FrameSpecError, Interior, KeyframeSnap, Linspace, Uniform, VLLMSampler


def frame_count(spec) -> int | None:
    """The fixed number of frames a spec takes, or None (rate-based and segment specs, `file`, unparseable text)."""
    try:
        parsed = FrameSpec.parse(str(spec))
    except FrameSpecError:
        return None
    if isinstance(parsed, KeyframeSnap):
        parsed = parsed.spec
    return parsed.n if isinstance(parsed, (Uniform, Linspace, Interior, VLLMSampler)) else None


def frame_sort_key(spec) -> tuple:
    """Counted specs first, by count (then text, so uniform:8 and linspace:8 keep a fixed order); the rest after,
    in text order."""
    n = frame_count(spec)
    return (0, n, str(spec)) if n is not None else (1, 0, str(spec))


def value_sort_key(column: str, value) -> tuple:
    """Sort key of one system column's value: frame specs by frame count, other columns as text (None last)."""
    if column == "frame_spec":
        return frame_sort_key(value)
    return (value is None, "" if value is None else str(value))


def system_sort_key(system: dict, columns) -> tuple:
    """Sort key of a system (a row of system columns) over `columns`, in their order."""
    return tuple(value_sort_key(c, system.get(c)) for c in columns)


def sorted_values(column: str, values) -> list:
    """The distinct values of one column in display order."""
    return sorted(dict.fromkeys(values), key=lambda v: value_sort_key(column, v))
