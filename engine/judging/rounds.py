"""Official retry rounds, reproduced after streaming (JudgingPolicy.stop_when_failed_at_most).

Official scripts (a release's `evaluation/eval.py`) ask every item, then re-ask the rejected ones in ROUNDS, and
stop as soon as at most K items are still rejected; what is rejected then is dropped. The streaming loop does not
wait for rounds: it re-asks an item as soon as its answer is rejected. The outcome is the same if, afterwards, an item
accepted only at an attempt whose round would not have run is turned back into a row without a verdict. Round r
(r >= 1) runs iff more than K items were still rejected after round r-1; since that count only falls, the rounds that
run are 1..R for one R. Round 0 itself runs only when the run has more than K items: with at most K, the official
script makes no judge call at all and prints nan (the official eval.py:431-432), so every row of such a run is turned
into a row without a verdict whose error starts with NOT_ASKED_MARK. Items are counted per official run: one task
of one captioning model and trial (see `group_of`).
"""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from capeval.engine.protocols.base import RequestContext
from capeval.engine.schemas import NO_VERDICT, NOT_ASKED_MARK, ParseStatus

DROPPED = ("dropped by the official retry rule: accepted at attempt {attempt}, but only {rounds} re-ask round(s) "
           "would have run ({failed} item(s) still failed after round {last}, at most {k} allowed)")
#: the text is stored in verdict rows (`error`): kept as it is so that verdict tables stay byte-identical
NOT_ASKED = (NOT_ASKED_MARK + ": this run has {n} item(s), at most max_allow_missing={k}, so the official script "
             "stops before its first round and makes no judge call (CAPability eval.py:431-432); its metrics are nan")


def group_of(row: dict) -> tuple:
    """What one official run covers: a task file judged for one caption set (captioner, prompt, frames) and trial."""
    return (row.get("task"), row.get("step"), row.get("captioner"), row.get("prompt_id"), row.get("frame_spec"),
            row.get("trial"))


def small_groups(tables: list[pa.Table], k: int) -> dict[tuple, int]:
    """group -> number of items, for the groups (official runs) of first-step request tables with at most `k` items:
    the official script makes no judge call for them, so none is sent. Items are counted as RetryRounds counts them:
    rows finished without asking (a failed caption: `missing` in the context) are not."""
    units: dict[tuple, set] = defaultdict(set)
    names = ("task", "step", "captioner", "prompt_id", "frame_spec", "trial", "item_id", "caption_key", "context")
    for t in tables:
        cols = [t.column(n).to_pylist() if n in t.column_names else [None] * t.num_rows for n in names]
        for task, step, captioner, prompt_id, frames, trial, item, caption, context in zip(*cols):
            if context and '"missing"' in context and RequestContext.decode(context).missing:
                continue
            group = group_of({"task": task, "step": step, "captioner": captioner, "prompt_id": prompt_id,
                              "frame_spec": frames, "trial": trial})
            units[group].add((item, caption))
    return {g: len(u) for g, u in units.items() if len(u) <= int(k)}


class RetryRounds:
    """Collects, per group, the attempt at which each item (unit) was accepted (None = never), then says which
    accepted items the official rounds would not have reached."""

    def __init__(self, k: int):
        self.k = int(k)
        self._counts: dict[tuple, Counter] = defaultdict(Counter)  # group -> attempt (None = never) -> units
        self._late: dict[tuple, list[tuple[int, list]]] = defaultdict(list)  # group -> (attempt, row ids) if >= 1
        # group -> row ids of every unit, kept only while the group has at most k units (then round 0 never runs)
        self._small: dict[tuple, list] = defaultdict(list)
        self._large: set[tuple] = set()

    def add(self, group: tuple, accepted_attempt: int | None, row_ids: list) -> None:
        self._counts[group][accepted_attempt] += 1
        if accepted_attempt:  # attempt 0 is round 0, which runs whenever the group has more than k units
            self._late[group].append((accepted_attempt, row_ids))
        if group not in self._large:
            if sum(self._counts[group].values()) > self.k:
                self._large.add(group)
                self._small.pop(group, None)
            else:
                self._small[group].append(row_ids)

    def last_round(self, group: tuple) -> tuple[int, int]:
        """(R, failed after round R): the last re-ask round that runs and how many items are still failed then."""
        counts = self._counts[group]
        top = max((a for a in counts if a is not None), default=0)

        def failed_after(r: int) -> int:
            return sum(n for a, n in counts.items() if a is None or a > r)

        r = 0
        while r < top and failed_after(r) > self.k:
            r += 1
        return r, failed_after(r)

    def dropped(self) -> dict:
        """row id -> error text, for the rows of items accepted in a round that would not have run."""
        out = {}
        for group, units in self._small.items():
            msg = NOT_ASKED.format(n=len(units), k=self.k)
            for row_ids in units:
                for rid in row_ids:
                    out[rid] = msg
        for group, late in self._late.items():
            if group in self._small:
                continue
            last, failed = self.last_round(group)
            for attempt, row_ids in late:
                if attempt > last:
                    msg = DROPPED.format(attempt=attempt, rounds=last, failed=failed, last=last, k=self.k)
                    for rid in row_ids:
                        out[rid] = msg
        return out


def apply_drops(t: pa.Table, dropped: dict) -> pa.Table:
    """`t` (verdict rows, or transcript rows: with _depth/_order) with the rows `dropped` names (RetryRounds.dropped)
    turned into rows without a verdict whose error says why."""
    if not dropped or not t.num_rows:
        return t
    ids = t["_depth"].to_numpy().astype(np.int64) * (1 << 40) + t["_order"].to_numpy()
    wanted = {d * (1 << 40) + o: msg for (d, o), msg in dropped.items()}
    mask_np = np.isin(ids, np.fromiter(wanted, np.int64, len(wanted)))
    mask = pa.array(mask_np)
    errors = [wanted.get(int(i)) if m else None for i, m in zip(ids, mask_np)]
    t = t.set_column(t.schema.get_field_index("verdict"), "verdict",
                     pc.if_else(mask, pa.scalar(NO_VERDICT, pa.int8()), t["verdict"]))
    t = t.set_column(t.schema.get_field_index("parse_status"), "parse_status",
                     pc.if_else(mask, pa.scalar(int(ParseStatus.FAILED), pa.int8()), t["parse_status"]))
    t = t.set_column(t.schema.get_field_index("detail"), "detail",
                     pc.if_else(mask, pa.scalar(None, pa.string()), t["detail"]))
    t = t.set_column(t.schema.get_field_index("error"), "error",
                     pc.if_else(mask, pa.array(errors, pa.string()), t["error"]))
    return t
