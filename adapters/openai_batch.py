"""`openai-batch`: the OpenAI-compatible judge through the provider's Batch API (OpenAI, and the providers that copy
its /v1/files and /v1/batches endpoints), at the batch price, answered within the completion window (24 h).

Each round of the judge loop becomes batch input files (adapters/batch_rounds.py); this module talks to the
provider through the `openai` SDK (its retries, timeouts and error classes): upload, create, retrieve, download.
Every step is recorded in the state (adapters/batch_state.py) before the next is taken, so after a kill:

- a batch whose id was recorded is polled again, never recreated;
- a batch created but not yet recorded (killed between the create call and its answer) is found by listing the
  provider's batches for the recorded input file, and adopted;
- an input file already uploaded is reused (recorded by its SHA-256; a file whose upload was cut off is looked up
  by its name, `capeval-<sha>.jsonl`).

Params: every option of the streaming `openai` judge (model, base_url, api_key_env, structured, prices, ...) plus
`capeval.adapters.batch_rounds.BatchOptions` (state_dir, round_requests, max_file_requests, max_file_bytes, poll_s,
poll_max_s, max_unknown_polls, batch_discount, wait) and `completion_window` ("24h").

A batch whose status capeval does not know (none of the Batch API's documented statuses) is polled at most
`max_unknown_polls` times in a row, then cancelled (best effort) and recorded as failed with the reason: its
requests become retryable errors and the next run sends them again, rather than polling forever.
"""

from __future__ import annotations

import logging
import time

from capeval.adapters.base import BackendFatalError
from capeval.adapters.batch_files import CHAT_URL, BatchLine, file_bytes, file_digest
from capeval.adapters.batch_rounds import BatchJudge, BatchOptions, http_params, round_params
from capeval.adapters.batch_state import KNOWN_STATUSES, TERMINAL, UNCONFIRMED, BatchState, abandoned, owner
from capeval.adapters.openai_http import HTTPConfig
from capeval.engine.params import Param
from capeval.engine.secrets import redact_url

log = logging.getLogger(__name__)

_LIST_LOOKBACK_S = 6 * 3600  # how far back (before our record) to look for a batch a killed process created


def _fatal(exc: BaseException) -> BaseException:
    """401/403 from the SDK -> BackendFatalError (the loop stops the run); anything else as it is."""
    status = getattr(exc, "status_code", None)
    if status in (401, 403):
        return BackendFatalError(f"HTTP {status} {type(exc).__name__}: {exc} (check the API key and its access to "
                                 "the Batch API)")
    return exc


class OpenAIBatchJudge(BatchJudge):
    """Judge over an OpenAI-compatible Batch API (see the module docstring)."""

    params = (Param("completion_window", (str,), "24h", "the provider's completion window"),
              *round_params(BatchOptions()),
              Param("poll_s", (float,), BatchOptions.poll_s, "first wait between polls (grows x1.5)"),
              Param("poll_max_s", (float,), BatchOptions.poll_max_s, "longest wait between polls"),
              Param("max_unknown_polls", (int,), BatchOptions.max_unknown_polls, "polls in a row with a status "
                    "capeval does not know before the batch is given up"))

    def __init__(self, config: HTTPConfig | None = None, *, completion_window: str = "24h",
                 state_dir: str | None = None, round_requests: int = BatchOptions.round_requests,
                 max_file_requests: int = BatchOptions.max_file_requests,
                 max_file_bytes: int = BatchOptions.max_file_bytes, poll_s: float = BatchOptions.poll_s,
                 poll_max_s: float = BatchOptions.poll_max_s, max_unknown_polls: int = BatchOptions.max_unknown_polls,
                 batch_discount: float = BatchOptions.batch_discount, wait: bool = True, **overrides):
        window = completion_window
        if not isinstance(window, str) or not window:
            raise ValueError(f"completion_window: expected a window such as '24h', got {window!r}")
        http = http_params(overrides)
        base = config or HTTPConfig()
        cfg = HTTPConfig(**{**base.__dict__, **http})
        super().__init__(cfg, BatchOptions(state_dir=state_dir, round_requests=round_requests,
                                           max_file_requests=max_file_requests, max_file_bytes=max_file_bytes,
                                           poll_s=poll_s, poll_max_s=poll_max_s, max_unknown_polls=max_unknown_polls,
                                           batch_discount=batch_discount,
                                           wait=wait))
        self.completion_window = window
        # the state's name for the endpoint: without the URL's credentials (a key rotated keeps the same batches)
        self.provider = f"openai:{redact_url(cfg.resolved_base_url().rstrip('/'))}"
        self._api_key = cfg.resolved_api_key()  # fails here, before anything is written, when there is none
        self._client = None
        self._maybe_uploaded: set[str] = set()  # shas whose upload a killed process may have finished
        self._unknown: dict[int, int] = {}  # local batch id -> polls in a row that reported an unknown status

    @property
    def client(self):
        if self._client is None:
            from openai import OpenAI

            cfg = self.config
            self._client = OpenAI(api_key=self._api_key, base_url=cfg.resolved_base_url(), timeout=cfg.timeout_s,
                                  max_retries=max(0, cfg.max_attempts - 1))
        return self._client

    def where(self) -> str:
        return redact_url(self.config.resolved_base_url())

    def _call(self, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - 401/403 become fatal, the rest goes to the caller
            raise _fatal(exc) from exc

    # -- after a kill -------------------------------------------------------------------------------------------------
    def settle(self, state: BatchState) -> None:
        rows = [r for r in state.batches(self.provider, UNCONFIRMED) if abandoned(r)]
        if not rows:
            return
        creating = {r["file_id"]: r for r in rows if r["status"] == "creating" and r["file_id"]}
        found = self._batches_for(set(creating), since=min(r["created"] for r in rows) - _LIST_LOOKBACK_S)
        for r in rows:
            batch = found.get(r["file_id"]) if r["status"] == "creating" else None
            if batch is not None:
                log.info("judge %s: adopting batch %s (created by a process that was stopped before recording it)",
                         self.name, batch.id)
                state.update(r["id"], batch_id=batch.id, status=batch.status, owner=owner())
            else:  # it never reached the provider: its requests are free again
                if r["status"] == "uploading":
                    self._maybe_uploaded.add(r["sha"])
                state.drop(r["id"])

    def _batches_for(self, file_ids: set[str], since: float) -> dict:
        """input file id -> the provider's batch made from it (newest first; stops at batches older than `since`)."""
        found: dict = {}
        if not file_ids:
            return found
        for batch in self._call(self.client.batches.list, limit=100):
            if batch.input_file_id in file_ids and batch.input_file_id not in found:
                found[batch.input_file_id] = batch
                if len(found) == len(file_ids):
                    break
            if batch.created_at and batch.created_at < since:
                break
        return found

    def _uploaded(self, sha: str, size: int) -> str | None:
        """The provider's file made from these bytes by a killed process's upload, looked up by name."""
        if sha not in self._maybe_uploaded:
            return None
        self._maybe_uploaded.discard(sha)
        name = _file_name(sha)
        for f in self._call(self.client.files.list, purpose="batch"):
            if f.filename == name and int(f.bytes or 0) == size:
                return f.id
        return None

    # -- submit, poll, fetch ------------------------------------------------------------------------------------------
    def submit(self, state: BatchState, chunk: list[BatchLine]) -> int:
        data = file_bytes(chunk)
        sha = file_digest(data)
        local = state.begin(self.provider, sha, [(bl.key, bl.body_sha) for bl in chunk])
        try:
            file_id = state.file_id(self.provider, sha) or self._uploaded(sha, len(data))
            if file_id is None:
                f = self._call(self.client.files.create, file=(_file_name(sha), data, "application/jsonl"),
                               purpose="batch")
                file_id = f.id
            state.remember_file(self.provider, sha, file_id, len(chunk), len(data))
            state.update(local, file_id=file_id, status="creating")
        except BaseException:
            state.drop(local)  # nothing was created: the requests are free again
            raise
        batch = self._create(state, local, sha, file_id, data, len(chunk))
        state.update(local, batch_id=batch.id, status=batch.status)
        log.info("judge %s: batch %s created (%d requests, %d bytes)", self.name, batch.id, len(chunk), len(data))
        return local

    def _create(self, state: BatchState, local: int, sha: str, file_id: str, data: bytes, n: int):
        import openai

        def create(fid: str):
            return self._call(self.client.batches.create, input_file_id=fid, endpoint=CHAT_URL,
                              completion_window=self.completion_window, metadata={"capeval_file": sha[:32]})

        try:
            return create(file_id)
        except openai.NotFoundError:  # the reused file is gone (deleted, expired): upload it again, once
            state.forget_file(self.provider, sha)
            f = self._call(self.client.files.create, file=(_file_name(sha), data, "application/jsonl"),
                           purpose="batch")
            state.remember_file(self.provider, sha, f.id, n, len(data))
            state.update(local, file_id=f.id)
            try:
                return create(f.id)
            except BaseException as exc:
                return self._created_anyway(state, local, f.id, exc)
        except BaseException as exc:
            return self._created_anyway(state, local, file_id, exc)

    def _created_anyway(self, state: BatchState, local: int, file_id: str, exc: BaseException):
        """The create call failed or timed out: it may still have made the batch. Adopt it if so, else forget it."""
        if isinstance(exc, (BackendFatalError, KeyboardInterrupt)):
            raise exc
        try:
            batch = self._batches_for({file_id}, since=time.time() - _LIST_LOOKBACK_S).get(file_id)
        except Exception:  # noqa: BLE001 - cannot tell: keep the record; a later run settles it
            raise exc from None
        if batch is not None:
            return batch
        state.drop(local)
        raise exc

    def poll(self, state: BatchState, locals_: list[int]) -> list[int]:
        done = []
        for local in locals_:
            row = state.batch(local)
            if row is None or row["status"] == "collected" or not row["batch_id"]:
                done.append(local)
                continue
            try:
                b = self._call(self.client.batches.retrieve, row["batch_id"])
            except BackendFatalError:
                raise
            except Exception as exc:  # noqa: BLE001 - a failed poll is retried at the next one
                log.warning("judge %s: could not poll batch %s: %s", self.name, row["batch_id"], exc)
                continue
            errors = getattr(getattr(b, "errors", None), "data", None) or []
            note = "; ".join(f"{e.code}: {e.message}" for e in errors[:3]) or None
            status = b.status
            if status in KNOWN_STATUSES:
                self._unknown.pop(local, None)
            else:  # a status capeval cannot read: polled a bounded number of times, then given up with the reason
                seen = self._unknown[local] = self._unknown.get(local, 0) + 1
                if seen < self.options.max_unknown_polls:
                    log.warning("judge %s: batch %s reports status %r, unknown to capeval (poll %d of %d)", self.name,
                                row["batch_id"], status, seen, self.options.max_unknown_polls)
                    continue
                note = (f"the provider reported status {status!r}, unknown to capeval, at {seen} polls in a row "
                        f"(max_unknown_polls); given up, its requests are sent again by the next run"
                        + (f"; {note}" if note else ""))
                log.warning("judge %s: batch %s: %s", self.name, row["batch_id"], note)
                self._cancel(row["batch_id"])
                status = "failed"
            state.update(local, status=status, output_file_id=b.output_file_id, error_file_id=b.error_file_id,
                         note=note)
            if status in TERMINAL:
                done.append(local)
        return done

    def _cancel(self, batch_id: str) -> None:
        """Ask the provider to stop a batch given up on (best effort: its requests are sent again elsewhere)."""
        try:
            self._call(self.client.batches.cancel, batch_id)
        except Exception as exc:  # noqa: BLE001 - the batch is given up on whether or not the cancel arrives
            log.warning("judge %s: could not cancel batch %s: %s", self.name, batch_id, exc)

    def fetch(self, state: BatchState, local: int) -> tuple[bytes | None, bytes | None]:
        row = state.batch(local) or {}
        return tuple(self._call(self.client.files.content, fid).content if fid else None
                     for fid in (row.get("output_file_id"), row.get("error_file_id")))  # type: ignore[return-value]

    def close(self) -> None:
        super().close()
        if self._client is not None:
            self._client.close()
            self._client = None


def _file_name(sha: str) -> str:
    return f"capeval-{sha[:40]}.jsonl"
