"""The batch file format shared by OpenAI's Batch API, the providers that copy it and vLLM's `run_batch`.

Input: one JSON object per line, `{"custom_id": KEY, "method": "POST", "url": "/v1/chat/completions", "body": BODY}`.
capeval writes the request key as `custom_id` and BODY as the very bytes the streaming judge would POST
(`capeval.adapters.openai_http.OpenAIJudge.body`): the line is put together around the encoded body, never re-encoded, so a
batch asks exactly what a stream would ask and the judgment cache may hold answers of either.

Output and error files: one object per answered request, `{"custom_id", "response": {"status_code", "body"},
"error"}`; `body` is a chat completion when the status is 200. Lines come in any order and a request may be missing
(a batch that expired or failed before reaching it). `read_results` reads both files into one result per key; a
custom_id repeated within one file fails that request (counted, never guessed).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Iterable, Iterator

from capeval.adapters.http_chat import encode_body

CHAT_URL = "/v1/chat/completions"
_LINE_HEAD = b'{"custom_id":'
_LINE_MID = b',"method":"POST","url":"' + CHAT_URL.encode() + b'","body":'


def body_digest(body: bytes) -> str:
    """Identity of a request body: a stored answer is served again only to the same bytes."""
    return hashlib.sha256(body).hexdigest()[:32]


@dataclass(frozen=True)
class BatchLine:
    key: str  # the judge request's key, written as custom_id
    body_sha: str
    unwrap: str | None  # the structured-output field to unwrap from the answer (capeval.adapters.openai_http)
    line: bytes  # the JSONL line, without its newline


def batch_line(key: str, body: bytes, unwrap: str | None) -> BatchLine:
    line = _LINE_HEAD + encode_body(key) + _LINE_MID + body + b"}"
    return BatchLine(key, body_digest(body), unwrap, line)


def split(lines: list[BatchLine], max_requests: int, max_bytes: int) -> tuple[list[list[BatchLine]], list[BatchLine]]:
    """Chunks in input order, each at most `max_requests` lines and `max_bytes` bytes (newlines counted), and the
    lines that alone exceed `max_bytes` (they cannot be sent in any file)."""
    chunks: list[list[BatchLine]] = []
    too_big: list[BatchLine] = []
    current: list[BatchLine] = []
    size = 0
    for bl in lines:
        n = len(bl.line) + 1
        if n > max_bytes:
            too_big.append(bl)
            continue
        if current and (len(current) >= max_requests or size + n > max_bytes):
            chunks.append(current)
            current, size = [], 0
        current.append(bl)
        size += n
    if current:
        chunks.append(current)
    return chunks, too_big


def file_bytes(chunk: Iterable[BatchLine]) -> bytes:
    return b"".join(bl.line + b"\n" for bl in chunk)


def file_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class LineResult:
    key: str
    body: bytes | None  # the chat completion (status 200), encoded
    error: str | None  # why there is no answer
    lines: int = 1  # lines of one file that name this custom_id (more than one: none of them is taken)


def _error_text(error) -> str:
    if isinstance(error, dict):
        inner = error.get("error") if isinstance(error.get("error"), dict) else error  # vLLM wraps ErrorResponse
        code, message = inner.get("code"), inner.get("message")
        return f"{code}: {message}" if code is not None and message else str(message or code or error)
    return str(error)


def _one(record: dict) -> LineResult | None:
    key = record.get("custom_id")
    if not isinstance(key, str):
        return None
    response = record.get("response") if isinstance(record.get("response"), dict) else None
    status = response.get("status_code") if response else None
    body = response.get("body") if response else None
    if record.get("error"):
        return LineResult(key, None, _error_text(record["error"]))
    if status == 200 and isinstance(body, dict):
        return LineResult(key, encode_body(body), None)
    if isinstance(body, dict) and body.get("error"):
        return LineResult(key, None, f"HTTP {status}: {_error_text(body['error'])}")
    return LineResult(key, None, f"HTTP {status}: no response body" if status else "no response in the batch output")


def iter_results(data: bytes | None) -> Iterator[LineResult]:
    """The results of an output or error file; unreadable lines are skipped (their requests count as unanswered)."""
    for raw in (data or b"").splitlines():
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except ValueError:
            continue
        result = _one(record) if isinstance(record, dict) else None
        if result is not None:
            yield result


def read_results(*files: bytes | None) -> dict[str, LineResult]:
    """One result per key over the output and error files; an answer wins over an error for the same key. A key
    that several lines of one file answer is never guessed (which line is the answer?): its result is an error
    with `lines` set to how many lines named it, and the request is sent again by the next run."""
    out: dict[str, LineResult] = {}
    repeated: dict[str, int] = {}
    for data in files:
        count: dict[str, int] = {}
        for result in iter_results(data):
            count[result.key] = count.get(result.key, 0) + 1
            have = out.get(result.key)
            if have is None or (have.body is None and result.body is not None):
                out[result.key] = result
        for key, n in count.items():
            if n > 1:
                repeated[key] = max(n, repeated.get(key, 0))
    for key, n in repeated.items():
        out[key] = LineResult(key, None, f"custom_id {key!r} is answered by {n} lines of one batch file; none is "
                                         "taken", lines=n)
    return out
