"""Transcript capture inside the judge loop (the table and its sinks: engine/store/transcripts.py).

`Cell.answer` calls `attempt` for every answer a row's current ask gets (a reply or a backend error, with where it
came from: sent, cache, shared); `Cell._final` calls `Transcriber.add` once per row; chunks of CHUNK rows go to the
cell's sink as Arrow tables. What a row sent is recomputed from the request row exactly as
`requests.to_judge_request` builds it (`attempt_sampling`), so nothing is kept per request in flight but the
attempts themselves."""

from __future__ import annotations

import operator

import pyarrow as pa

from capeval.engine.keys import json_schema_key
from capeval.engine.store.transcripts import CAPTURE

from .requests import attempt_sampling
from capeval.engine.judging.requests import load_jpegs

CHUNK = 8192  # rows per chunk handed to the sink (a row group of the spool and of the committed file)
SLICE = 1024  # rows converted to Arrow at a time
_ID_NAMES = ("request_key", "protocol", "task", "item_id", "video_id", "caption_key", "captioner", "prompt_id",
             "frame_spec", "step", "sub_index", "seed", "trial")
_IDS = operator.itemgetter(*_ID_NAMES)
#: the order `Transcriber.add` gives its values in: CAPTURE's columns
_ADD_ORDER = _ID_NAMES + ("judge", "system", "user", "frames_path", "images_digest", "n_images", "max_tokens",
                          "temperature", "choices", "json_schema_name", "json_schema_digest", "verdict",
                          "parse_status", "detail", "error", "attempts", "_depth", "_order")
assert tuple(CAPTURE.names) == _ADD_ORDER, "transcribe.py: Transcriber.add's values must follow CAPTURE"


def attempt(row, answer, source: str, outcome: dict, reask_temperature) -> dict:
    """One ATTEMPT struct: the row's current ask and what came of it. `answer`: a CachedResponse, or the backend's
    error text; `outcome`: the verdict fields `Cell.answer` parsed from it."""
    key, temperature, seed = attempt_sampling(row.req, row.attempt, row.ctx, reask_temperature)
    rec = {"attempt": row.attempt, "key": key if row.attempt else None, "source": source, "temperature": temperature, "seed": seed,
           "verdict": outcome.get("verdict"), "parse_status": outcome.get("parse_status"),
           "detail": outcome.get("detail"), "error": outcome.get("error")}
    replies = getattr(answer, "replies", None) if isinstance(answer, str) else None
    if replies:  # what the server answered before the backend refused it (a cut or malformed reply)
        rec["reply"] = replies[0] if len(replies) == 1 else "\n".join(
            f"[HTTP attempt {i}]\n{r}" for i, r in enumerate(replies, 1))
    if not isinstance(answer, str):
        cost = getattr(answer, "cost_usd", None)
        rec.update(reply=answer.text, prompt_tokens=answer.prompt_tokens,
                   cached_prompt_tokens=answer.cached_prompt_tokens, completion_tokens=answer.completion_tokens,
                   reasoning_tokens=outcome.get("reasoning_tokens"), latency_s=answer.latency_s,
                   cost_usd=cost if cost else None)
    return rec


def _schema_ref(text: str | None) -> tuple[str | None, str | None]:
    if not text:
        return None, None
    import json

    try:
        title = json.loads(text).get("title")
    except (ValueError, AttributeError):
        title = None
    return (title if isinstance(title, str) else None), json_schema_key(text)


class Transcriber:
    """Collects a cell's transcript rows and hands them to `sink` (append(table) / finish(fix)) in chunks.

    Rows are kept column by column (one list per CAPTURE column) and a chunk is made column by column: about a
    third of the time `Table.from_pylist` takes on the same rows, time the judge loop's thread spends not sending."""

    def __init__(self, sink, judge_name: str):
        self.sink, self.judge_name = sink, judge_name
        self._columns: list[list] = [[] for _ in CAPTURE]
        self._n = 0  # rows in _columns
        self._batches: list[pa.RecordBatch] = []  # the chunk's earlier rows, converted SLICE at a time
        self._rows = 0  # rows of the chunk (batches and columns)
        self._schemas: dict = {}

    def add(self, row, fields: dict) -> None:
        req, ctx = row.req, row.ctx
        schema = req.get("json_schema")
        if schema not in self._schemas:
            self._schemas[schema] = _schema_ref(schema)
        name, digest = self._schemas[schema]
        frames = ctx.frames_path
        temperature = ctx.temperature
        max_tokens = req.get("max_tokens")
        # the limit the backend sends, when it differs from the protocol's (the OpenAI-compatible judge adds room
        # for the JSON object around a structured choice)
        loop = row.cell.loop
        if loop is not None and loop.capabilities.adjusts_max_tokens and max_tokens is not None:
            max_tokens = loop.judge.sent_max_tokens(max_tokens, req.get("choices"), req.get("json_schema"))
        values = _IDS(req) + (
            self.judge_name, req.get("system"), req.get("user"),
            frames, ctx.images_digest,
            row.n_images if row.n_images is not None else (_count_images(frames) if frames else 0),
            max_tokens, None if temperature is None else float(temperature),
            req.get("choices"), name, digest,
            fields.get("verdict"), fields.get("parse_status"),
            fields.get("detail"), fields.get("error"), row.attempts or [],
            row.depth, row.order)
        for column, value in zip(self._columns, values):
            column.append(value)
        self._n += 1
        self._rows += 1
        row.attempts = None
        if self._rows >= CHUNK:
            self.flush()
        elif self._n >= SLICE:
            self._convert()

    def _convert(self) -> None:
        """The rows kept so far into one Arrow batch (SLICE rows: a short pause of the judge loop's thread, where
        converting a whole chunk at once held it ~CHUNK/SLICE times longer)."""
        columns, self._columns, self._n = self._columns, [[] for _ in CAPTURE], 0
        self._batches.append(pa.RecordBatch.from_arrays([pa.array(c, f.type) for c, f in zip(columns, CAPTURE)],
                                                        schema=CAPTURE))

    def flush(self) -> None:
        if self._n:
            self._convert()
        if self._batches:
            batches, self._batches, self._rows = self._batches, [], 0
            self.sink.append(pa.Table.from_batches(batches, schema=CAPTURE))  # one row group of the spool

    def finish(self, fix=None) -> None:
        self.flush()
        self.sink.finish(fix)


def _count_images(frames_path: str) -> int | None:
    """Frames a request shows, for rows whose request this run did not build (answered from the cache)."""
    try:
        return len(load_jpegs(frames_path))
    except Exception:  # noqa: BLE001 - frames gone since: the count is unknown, the transcript still stands
        return None
