"""A fake OpenAI Batch API on 127.0.0.1 (aiohttp, a background thread): /v1/files (upload, list, retrieve, content)
and /v1/batches (create, list, retrieve, cancel), with output and error files in OpenAI's layout.

Each request of a batch is answered as the streaming loopback server answers it (capeval.benchmarks.loopback_server:
`answer_for` and `completion_body`, deterministic per body), so a sweep judged through batches must give the verdicts
of the same sweep judged through the streaming judge. Knobs (`Behaviour`, changeable while running through
`server.behaviour`):

- `order`: "fifo" (a batch completes at its first retrieve), "reverse" (it completes only once every batch created
  after it has: batches finish out of order), "hold" (nothing completes until `order` changes);
- `fail_once`: custom_ids whose user text contains one of these strings fail (HTTP 500 in the error file) the first
  time they are answered; the next batch that holds them answers them;
- `expire`: ordinals (1 = the first batch created) of batches that expire: the first half of their requests is
  answered, the rest reported `batch_expired` in the error file (a batch cancelled through the API likewise, with
  `batch_cancelled`);
- `create_delay_s`: the create call registers the batch, then waits this long before it answers (a client killed
  meanwhile has created a batch it never heard of);
- `broken_once`: {marker: kind}: a request whose body contains the marker is answered badly the first time
  ("empty": a 200 body with `choices: []`; "oversize": a reply of `oversize_chars` characters; "duplicate": two
  output lines with different answers for its custom_id); the next batch that holds it answers it normally;
- `status`: when set, every batch not finished yet reports this status (e.g. one the Batch API does not have).

`stats()` gives every batch created (id, its custom_ids), how often each custom_id was put in a batch, uploads.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field

from capeval.benchmarks.loopback_server import answer_for, completion_body


@dataclass
class Behaviour:
    order: str = "fifo"
    fail_once: tuple[str, ...] = ()
    expire: tuple[int, ...] = ()
    create_delay_s: float = 0.0
    broken_once: dict = field(default_factory=dict)
    oversize_chars: int = 5000
    status: str | None = None


@dataclass
class _Batch:
    obj: dict
    keys: list[str]
    lines: list[dict]
    ordinal: int


@dataclass
class _World:
    files: dict = field(default_factory=dict)  # id -> (meta, bytes)
    batches: dict = field(default_factory=dict)  # id -> _Batch
    seen: dict = field(default_factory=dict)  # custom_id -> times put in a created batch
    failed: set = field(default_factory=set)  # custom_ids failed once already
    broken: set = field(default_factory=set)  # custom_ids answered badly once already
    uploads: int = 0
    creates: int = 0


class FakeBatchServer:
    def __init__(self, behaviour: Behaviour | None = None):
        self.behaviour = behaviour or Behaviour()
        self.world = _World()
        self._lock = threading.Lock()
        self.port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # -- the model of the API -----------------------------------------------------------------------------------------
    def _file(self, data: bytes, purpose: str, filename: str) -> dict:
        fid = f"file-{len(self.world.files) + 1:05d}"
        meta = {"id": fid, "object": "file", "bytes": len(data), "created_at": int(time.time()), "filename": filename,
                "purpose": purpose, "status": "processed"}
        self.world.files[fid] = (meta, data)
        return meta

    def _create(self, body: dict) -> dict:
        meta, data = self.world.files[body["input_file_id"]]
        lines = [json.loads(raw) for raw in data.splitlines() if raw.strip()]
        keys = [line["custom_id"] for line in lines]
        if len(set(keys)) != len(keys):
            raise ValueError("duplicate custom_id in the input file")
        self.world.creates += 1
        bid = f"batch_{self.world.creates:05d}"
        obj = {"id": bid, "object": "batch", "endpoint": body["endpoint"], "errors": None,
               "input_file_id": body["input_file_id"], "completion_window": body["completion_window"],
               "status": "validating", "output_file_id": None, "error_file_id": None,
               "created_at": int(time.time()), "metadata": body.get("metadata"),
               "request_counts": {"total": len(lines), "completed": 0, "failed": 0}}
        self.world.batches[bid] = _Batch(obj, keys, lines, self.world.creates)
        for k in keys:
            self.world.seen[k] = self.world.seen.get(k, 0) + 1
        return obj

    def _may_complete(self, b: _Batch) -> bool:
        order = self.behaviour.order
        if order == "hold":
            return False
        if order == "reverse":
            return all(o.obj["status"] in ("completed", "expired", "cancelled", "failed")
                       for o in self.world.batches.values() if o.ordinal > b.ordinal)
        return True

    def _finish(self, b: _Batch, status: str) -> None:
        out, err = [], []
        expire = status != "cancelled" and b.ordinal in self.behaviour.expire
        # an expired or cancelled batch answered the requests it reached (here: the first half), not the others
        answered = len(b.lines) // 2 if expire or status == "cancelled" else len(b.lines)
        for i, line in enumerate(b.lines):
            rid = f"batch_req_{b.obj['id']}_{i}"
            body = line["body"]
            if i >= answered:
                code = "batch_cancelled" if status == "cancelled" else "batch_expired"
                err.append({"id": rid, "custom_id": line["custom_id"], "response": None,
                            "error": {"code": code, "message": "This request was not executed before the batch "
                                                               "ended."}})
                continue
            text = json.dumps(body)
            if any(m in text for m in self.behaviour.fail_once) and line["custom_id"] not in self.world.failed:
                self.world.failed.add(line["custom_id"])
                err.append({"id": rid, "custom_id": line["custom_id"], "error": None,
                            "response": {"status_code": 500, "request_id": rid,
                                         "body": {"error": {"message": "internal error (injected)",
                                                            "type": "server_error"}}}})
                continue
            completion = json.loads(completion_body(body, answer_for(body)))
            kind = next((k for m, k in self.behaviour.broken_once.items() if m in text), None)
            if kind is not None and line["custom_id"] not in self.world.broken:
                self.world.broken.add(line["custom_id"])
                if kind == "empty":
                    completion["choices"] = []
                elif kind == "oversize":
                    completion["choices"][0]["message"]["content"] = "A" * self.behaviour.oversize_chars
                elif kind == "duplicate":
                    other = json.loads(json.dumps(completion))
                    other["choices"][0]["message"]["content"] = "Z"
                    out.append({"id": rid + "_dup", "custom_id": line["custom_id"], "error": None,
                                "response": {"status_code": 200, "request_id": rid + "_dup", "body": other}})
            out.append({"id": rid, "custom_id": line["custom_id"], "error": None,
                        "response": {"status_code": 200, "request_id": rid, "body": completion}})
        o = b.obj
        if out:
            o["output_file_id"] = self._file(b"".join(json.dumps(r).encode() + b"\n" for r in out), "batch_output",
                                             "batch_output.jsonl")["id"]
        if err:
            o["error_file_id"] = self._file(b"".join(json.dumps(r).encode() + b"\n" for r in err), "batch_output",
                                            "batch_errors.jsonl")["id"]
        o["status"] = "expired" if expire else status
        o["request_counts"] = {"total": len(b.lines), "completed": len(out), "failed": len(err)}
        o[f"{o['status']}_at"] = int(time.time())

    def _retrieve(self, bid: str) -> dict:
        b = self.world.batches[bid]
        if self.behaviour.status and b.obj["status"] in ("validating", "in_progress", "finalizing", "cancelling"):
            return {**b.obj, "status": self.behaviour.status}
        if b.obj["status"] in ("validating", "in_progress", "finalizing"):
            if self._may_complete(b):
                self._finish(b, "completed")
            else:
                b.obj["status"] = "in_progress"
        return b.obj

    def _cancel(self, bid: str) -> dict:
        b = self.world.batches[bid]
        if b.obj["status"] in ("validating", "in_progress", "finalizing"):
            self._finish(b, "cancelled")
        return b.obj

    def stats(self) -> dict:
        with self._lock:
            return {"batches": [{"id": b.obj["id"], "status": b.obj["status"], "keys": list(b.keys)}
                                for b in self.world.batches.values()],
                    "seen": dict(self.world.seen), "uploads": self.world.uploads}

    # -- HTTP ---------------------------------------------------------------------------------------------------------
    def _app(self):
        from aiohttp import web

        def page(items: list[dict], request) -> dict:
            limit = int(request.query.get("limit", 20))
            after = request.query.get("after")
            if after:
                ids = [i["id"] for i in items]
                items = items[ids.index(after) + 1:] if after in ids else []
            chunk = items[:limit]
            return {"object": "list", "data": chunk, "has_more": len(items) > limit,
                    "first_id": chunk[0]["id"] if chunk else None, "last_id": chunk[-1]["id"] if chunk else None}

        async def upload(request):
            form = await request.post()
            f = form["file"]
            data = f.file.read()
            with self._lock:
                self.world.uploads += 1
                return web.json_response(self._file(data, form["purpose"], f.filename))

        async def list_files(request):
            with self._lock:
                items = [m for m, _ in self.world.files.values()
                         if request.query.get("purpose") in (None, m["purpose"])]
            return web.json_response(page(items[::-1], request))

        async def get_file(request):
            with self._lock:
                return web.json_response(self.world.files[request.match_info["fid"]][0])

        async def content(request):
            with self._lock:
                _, data = self.world.files[request.match_info["fid"]]
            return web.Response(body=data, content_type="application/octet-stream")

        async def create(request):
            body = await request.json()
            with self._lock:
                if body.get("input_file_id") not in self.world.files:
                    return web.json_response({"error": {"message": "No such File object"}}, status=404)
                obj = dict(self._create(body))
            if self.behaviour.create_delay_s:
                await asyncio.sleep(self.behaviour.create_delay_s)
            return web.json_response(obj)

        async def list_batches(request):
            with self._lock:
                items = [dict(b.obj) for b in self.world.batches.values()][::-1]  # newest first, as OpenAI lists
            return web.json_response(page(items, request))

        async def retrieve(request):
            with self._lock:
                return web.json_response(dict(self._retrieve(request.match_info["bid"])))

        async def cancel(request):
            with self._lock:
                return web.json_response(dict(self._cancel(request.match_info["bid"])))

        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_post("/v1/files", upload)
        app.router.add_get("/v1/files", list_files)
        app.router.add_get("/v1/files/{fid}", get_file)
        app.router.add_get("/v1/files/{fid}/content", content)
        app.router.add_post("/v1/batches", create)
        app.router.add_get("/v1/batches", list_batches)
        app.router.add_get("/v1/batches/{bid}", retrieve)
        app.router.add_post("/v1/batches/{bid}/cancel", cancel)
        return app

    def start(self) -> "FakeBatchServer":
        from aiohttp import web

        got = threading.Event()

        async def serve():
            runner = web.AppRunner(self._app(), access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]
            self._stop = asyncio.Event()
            got.set()
            try:
                await asyncio.wait_for(self._stop.wait(), timeout=1800)
            except asyncio.TimeoutError:
                pass
            finally:
                await runner.cleanup()

        def main():
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(serve())
            self._loop.close()

        self._thread = threading.Thread(target=main, name="fake-batch-server", daemon=True)
        self._thread.start()
        if not got.wait(30):
            raise RuntimeError("fake batch server did not start within 30 s")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
