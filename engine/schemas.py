"""Arrow schemas shared by every stage: dataset → frames → captions → judge requests → verdicts → metrics.

Every stage hands the next an Arrow table of one of these shapes, and every row carries a content key
(`*_key`) computed by `capeval.engine.keys` from its inputs, config and model, so a rerun can skip what exists.
Structured annotations (a `{object: number}` dict, a list of events) travel as JSON text in `annotation`,
so one schema serves every benchmark.
"""

from __future__ import annotations

from enum import IntEnum

import pyarrow as pa


class ParseStatus(IntEnum):
    """Why a verdict row has (or lacks) a verdict code. Stored as int8 in `verdicts.parse_status`."""

    OK = 0  # parsed on the first answer
    REPAIRED = 1  # parsed after a repair (fence stripping, quote fixes) or a bounded re-ask
    FAILED = 2  # the judge answered, but nothing parseable came out after the retries
    ERROR = 3  # the backend failed (timeout, HTTP error) after its retries
    MISSING = 4  # no judgment exists for an item that should have one (e.g. released files with gaps)


#: The verdict code of a row without a verdict; counted in the `no_verdict` column of every count table.
NO_VERDICT = -1

#: How the `error` of a verdict row starts when the official retry rule turned it into a row without a verdict because
#: the official script would never have asked it (engine/judging/rounds.py writes it, a protocol's metrics read it).
NOT_ASKED_MARK = "not asked under the official retry rule"

ITEMS = pa.schema(
    [
        pa.field("benchmark", pa.string(), nullable=False),  # the registered protocol's name
        pa.field("task", pa.string(), nullable=False),  # task / dimension / question set
        pa.field("item_id", pa.string(), nullable=False),  # unique within (benchmark, task)
        pa.field("video_id", pa.string(), nullable=False),  # the video or image the item is about; bootstrap cluster
        pa.field("media_path", pa.string()),  # path of the video/image when known
        pa.field("media_type", pa.string()),  # video | image
        pa.field("annotation", pa.string()),  # question text or annotation; JSON text when structured
        pa.field("options", pa.list_(pa.string())),  # multiple-choice options, when any
        pa.field("answer", pa.string()),  # reference answer, when any
        pa.field("category", pa.string()),  # question type / category / duration bucket
        pa.field("extra", pa.string()),  # JSON text for anything benchmark-specific
    ]
)

FRAMES = pa.schema(
    [
        pa.field("frames_key", pa.string(), nullable=False),  # hash(video content, sampling spec, size)
        pa.field("video_id", pa.string(), nullable=False),
        pa.field("frame_spec", pa.string(), nullable=False),  # canonical text of the sampling spec
        pa.field("timestamps", pa.list_(pa.float64())),  # seconds, of the frames actually returned
        pa.field("height", pa.int32()),
        pa.field("width", pa.int32()),
        pa.field("path", pa.string()),  # .npy file with uint8 (T, H, W, 3)
        pa.field("error", pa.string()),  # per-video error; the run goes on
    ]
)

CAPTIONS = pa.schema(
    [
        pa.field("caption_key", pa.string(), nullable=False),  # hash(frames_key, captioner, revision, prompt, params)
        pa.field("captioner", pa.string(), nullable=False),
        pa.field("prompt_id", pa.string(), nullable=False),
        pa.field("frame_spec", pa.string(), nullable=False),
        pa.field("video_id", pa.string(), nullable=False),  # or item id for per-item captions
        pa.field("text", pa.string()),
        pa.field("n_tokens", pa.int32()),  # caption tokens (a conciseness metric divides by this)
        pa.field("prompt_tokens", pa.int32()),
        pa.field("latency_s", pa.float32()),
        pa.field("error", pa.string()),
        pa.field("truncated", pa.bool_()),  # generation stopped at the caption's max_tokens (never silent)
        pa.field("frames_sent", pa.int32()),  # frames the backend actually received, when a cap reduced them
        pa.field("timestamps_mode", pa.string()),  # the captioner's `timestamps`: "none" (prompt as written), "text"
        # Thinking models (engine/reasoning.py): `text` is the caption without its reasoning (what is judged);
        # `raw_text` the whole reply as returned, set only when reasoning was stripped from it (null: `text` is the
        # whole reply); `reasoning_tokens` the server's count, else an estimate (reasoning.reasoning_tokens), null
        # without reasoning. `n_tokens` counts the caption alone (the reply's tokens less the reasoning's).
        pa.field("raw_text", pa.string()),
        pa.field("reasoning_tokens", pa.int32()),
        # The frames-seen ledger (engine/frames/ledger.py), JSON text: decoder and version, frame indices and
        # timestamps, frame size, a digest of the pixels and what the backend handed its processor. In no key;
        # null for captions read from files and rows made before it existed.
        pa.field("frames_seen", pa.string()),
    ]
)

JUDGE_REQUESTS = pa.schema(
    [
        pa.field("request_key", pa.string(), nullable=False),  # hash(judge, revision, rendered prompt, sampling, seed)
        pa.field("protocol", pa.string(), nullable=False),
        pa.field("task", pa.string(), nullable=False),
        pa.field("item_id", pa.string(), nullable=False),
        pa.field("video_id", pa.string(), nullable=False),
        pa.field("caption_key", pa.string()),
        pa.field("captioner", pa.string()),
        pa.field("prompt_id", pa.string()),
        pa.field("frame_spec", pa.string()),
        pa.field("step", pa.string()),  # for multi-step protocols: answer | score | extract | entail_p | entail_r ...
        pa.field("sub_index", pa.int32()),  # one item may need several verdicts (one per object / event)
        pa.field("system", pa.string()),
        pa.field("user", pa.string(), nullable=False),  # shared prefix first, varying part last
        pa.field("choices", pa.list_(pa.string())),  # fixed answer set for structured decoding, when any
        pa.field("json_schema", pa.string()),  # JSON schema text for structured decoding, when any
        pa.field("max_tokens", pa.int32()),
        pa.field("seed", pa.int64()),
        pa.field("trial", pa.int16()),  # repeated judge seeds (protocols that judge each item several times)
    ]
)

VERDICTS = pa.schema(
    [
        pa.field("request_key", pa.string(), nullable=False),
        pa.field("protocol", pa.string(), nullable=False),
        pa.field("task", pa.string(), nullable=False),
        pa.field("item_id", pa.string(), nullable=False),
        pa.field("video_id", pa.string(), nullable=False),
        pa.field("captioner", pa.string()),
        pa.field("prompt_id", pa.string()),
        pa.field("frame_spec", pa.string()),
        pa.field("step", pa.string()),
        pa.field("sub_index", pa.int32()),
        pa.field("judge", pa.string(), nullable=False),
        pa.field("seed", pa.int64()),
        pa.field("trial", pa.int16()),
        pa.field("raw_output", pa.string()),
        pa.field("verdict", pa.int8(), nullable=False),  # protocol's code, or NO_VERDICT
        pa.field("parse_status", pa.int8(), nullable=False),  # ParseStatus
        pa.field("detail", pa.string()),  # parsed payload worth keeping (JSON text): predicted list, explanation
        pa.field("error", pa.string()),
        pa.field("prompt_tokens", pa.int32()),
        pa.field("cached_prompt_tokens", pa.int32()),
        pa.field("completion_tokens", pa.int32()),
        pa.field("latency_s", pa.float32()),
        pa.field("attempt", pa.int8()),  # 0 = accepted on the first ask, k = after the k-th re-ask
        # `raw_output` is the whole reply (reasoning included); the protocol's parser saw it without the reasoning
        # (engine/reasoning.py). Tokens of the reasoning: the server's count, else an estimate; null without any.
        pa.field("reasoning_tokens", pa.int32()),
    ]
)

#: Long-format metrics: one row per (group, metric). Group columns vary by protocol and come first.
METRIC_VALUE_COLUMNS = [
    ("metric", pa.string()),
    ("value", pa.float64()),
    ("ci_low", pa.float64()),  # percentile CI from a bootstrap that resamples videos (clusters)
    ("ci_high", pa.float64()),
    ("n", pa.int64()),  # verdicts counted in the denominator population
    ("n_no_verdict", pa.int64()),  # parse failures, backend errors and missing judgments: never dropped silently
]


#: The value columns of a metrics or results row (everything else is a group or system column): the metric and its
#: interval, counts, why a value is null (engine/metrics/reasons.py) and, for cells with several judge trials, the
#: interval's kind and the judge-noise share of its variance (engine/metrics/trials.py).
METRIC_VALUE_NAMES = [name for name, _ in METRIC_VALUE_COLUMNS] + ["reason", "ci_kind", "judge_noise_share"]


def metrics_schema(group_columns: list[str]) -> pa.Schema:
    return pa.schema([pa.field(c, pa.string()) for c in group_columns] + [pa.field(n, t) for n, t in METRIC_VALUE_COLUMNS])


def empty(schema: pa.Schema) -> pa.Table:
    return schema.empty_table()


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Select and cast `table` to `schema`, adding missing nullable columns as nulls; fails naming the column."""
    columns = []
    for field in schema:
        if field.name in table.column_names:
            col = table.column(field.name)
            if not col.type.equals(field.type):
                try:
                    col = col.cast(field.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                    raise TypeError(f"column {field.name!r}: cannot cast {col.type} to {field.type}: {exc}") from exc
        elif field.nullable:
            col = pa.nulls(table.num_rows, field.type)
        else:
            raise KeyError(f"required column {field.name!r} is missing (have {table.column_names})")
        if not field.nullable and col.null_count:
            raise ValueError(f"required column {field.name!r} has {col.null_count} null values")
        columns.append(col)
    return pa.Table.from_arrays(columns, schema=schema)


def utf8_text(text: str | None) -> str | None:
    """`text` as valid Unicode that UTF-8 (Arrow, Parquet, SQLite) can hold. JSON may escape surrogates
    (`"\\ud83d\\ude00"`, valid JSON that the official scripts accept) and `ast.literal_eval` keeps such a pair as two
    code points, a lone one (`"\\ud83d"`) always; either would make every write of the reply fail. A pair is joined
    into its character, a lone surrogate becomes U+FFFD. Text without surrogates is returned as it is."""
    if text is None or text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
