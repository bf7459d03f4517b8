"""Progress bars for the sweep stages (decode, caption): counts, throughput and ETA on stderr via tqdm (shown on
a terminal; `--no-progress` turns them off).

Updated by the driver as Ray tasks and actor calls finish, so they move also when the work runs on actors."""

from __future__ import annotations

import sys


class Bar:
    def __init__(self, total: int, desc: str, unit: str, enabled: bool):
        self.bar = None
        if enabled and total:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True, smoothing=0.1,
                            mininterval=0.5, disable=None)  # None: only on a terminal, not in logs

    def update(self, n: int) -> None:
        if self.bar is not None and n:
            self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self) -> "Bar":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
