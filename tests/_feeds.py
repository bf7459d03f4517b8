"""A request feed over a fixed list, for tests that drive a streaming backend's `stream()` directly (the judge loop
uses capeval.engine.judging.window.WindowFeed, which also takes requests added while the stream runs)."""

from __future__ import annotations


class FixedFeed:
    """capeval.adapters.base.RequestFeed over `requests`: `take(n)` hands out the next n, `closed` once all are taken."""

    def __init__(self, requests):
        self.items = list(requests)

    def take(self, n):
        out, self.items = self.items[:n], self.items[n:]
        return out

    @property
    def closed(self):
        return not self.items
