"""A CaptionWorker around a test's own captioner object (no registered backend built), and a captioner that
records what it is asked, for tests of the worker's own logic (segments, context, what a row records)."""

from __future__ import annotations

from capeval.adapters.base import CaptionResponse
from capeval.engine.stages.caption import CaptionWorker


class RecordingCaptioner:
    """Keeps every request; answers "part N", N counting the requests so far."""

    def __init__(self):
        self.requests = []

    def caption(self, requests):
        self.requests += list(requests)
        return [CaptionResponse(r.key, f"part {len(self.requests)}") for r in requests]


def worker_around(model, name: str = "rec") -> CaptionWorker:
    """A CaptionWorker whose captioner is `model` (its __init__, which builds a backend by name, is skipped)."""
    worker = CaptionWorker.__new__(CaptionWorker)
    worker.name, worker.model = name, model
    return worker
