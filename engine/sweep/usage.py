"""What a sweep's results cost: tokens and USD per cell, per judge and per captioner, told apart by whether this run
paid for them or reused them from the caches an earlier run filled.

Read after the judging, from what is stored, so a cell finished by an earlier run is costed like one run now:
- judge: the answers a cell's verdict rows rest on, every attempt included (a re-ask is its own request, under
  `capeval.engine.judging.requests.attempt_key`), each counted once per cell (rows sharing a request share one answer),
  with the tokens the server reported when the answer was made (the judgment cache keeps them, and when: an answer
  stored after this run started was paid by this run, an older one is reused). Server-reported cached prompt tokens
  are priced as cached (engine/sweep/prices.py).
- captions: the caption rows each cell was judged from (prompt tokens; completion = caption tokens + reasoning
  tokens); a caption stored before this run started is reused. Captions read from `[[captions]]` files cost
  nothing here (null: capeval did not make them).
Steps whose rows carry no verdict (a protocol's extract or answer steps: `intermediate_steps`), and cells a
Ctrl-C or SIGTERM left uncommitted, are named by no verdict row; their answers made in this run are added to their
judge's totals in run.json (`untraced_requests`), not to a cell's columns. A caption cell's captions are shared by its protocols and judges: each of those result
cells shows their cost, run.json's totals count each caption once.
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
from dataclasses import dataclass, field, fields

import numpy as np
import polars as pl

from capeval.engine.judging.requests import attempt_key
from capeval.engine.registry import lookup
from capeval.engine.store.judgment_cache import JudgmentCache
from capeval.engine.sweep.captioning import CaptionOutcome
from capeval.engine.sweep.cells import CellInputs, cell_captions, load_inputs, stored_verdict_batches
from capeval.engine.sweep.grid import CELL_COLUMNS, ResultCell
from capeval.engine.sweep.prices import Prices, resolve_prices
from capeval.engine.sweep.run import RunStores, SweepRun

#: the results table's cost columns, in order (engine/sweep/results.py documents them)
COST_COLUMNS = ["judge_requests", "prompt_tokens", "cached_prompt_tokens", "completion_tokens", "reasoning_tokens",
                "judge_cost_usd", "caption_prompt_tokens", "caption_completion_tokens", "caption_cost_usd", "cost_usd",
                "cost_usd_cached"]
_CHUNK = 500  # keys per SQLite lookup (below its bound-parameter limit)
SLICE_ROWS = 16_384  # verdict rows of a cell read into Python at a time (the ledger, `_Answers.of_cell`)


@dataclass
class Tokens:
    requests: int = 0
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0

    def add(self, prompt, cached, completion, reasoning) -> None:
        self.requests += 1
        self.prompt_tokens += int(prompt or 0)
        self.cached_prompt_tokens += int(cached or 0)
        self.completion_tokens += int(completion or 0)
        self.reasoning_tokens += int(reasoning or 0)

    def add_sums(self, requests: int, sums) -> None:
        """`requests` answers whose prompt, cached, completion and reasoning tokens sum to `sums`."""
        self.requests += int(requests)
        self.prompt_tokens += int(sums[0])
        self.cached_prompt_tokens += int(sums[1])
        self.completion_tokens += int(sums[2])
        self.reasoning_tokens += int(sums[3])

    def usd(self, prices: Prices | None) -> float | None:
        if prices is None:
            return None
        return prices.cost(self.prompt_tokens, self.cached_prompt_tokens, self.completion_tokens)

    def record(self, prices: Prices | None) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)} | {"cost_usd": _round(self.usd(prices))}


@dataclass
class Split:
    """Usage in two parts: paid by this run, reused from a cache filled earlier."""

    paid: Tokens = field(default_factory=Tokens)
    reused: Tokens = field(default_factory=Tokens)

    def add(self, paid: bool, *tokens) -> None:
        (self.paid if paid else self.reused).add(*tokens)

    def add_answers(self, answers: list[tuple], since: float) -> None:
        """Each of `answers`, (judge, prompt, cached, completion, reasoning, created): paid when created since
        `since`, reused when earlier or created None; summed on columns (a big cell has hundreds of thousands)."""
        if not answers:
            return
        _, prompt, cached, completion, reasoning, created = zip(*answers)
        paid = np.array([c is not None and c >= since for c in created], bool)
        tokens = np.array([[v or 0 for v in column] for column in (prompt, cached, completion, reasoning)], np.int64)
        n_paid = int(paid.sum())
        self.paid.add_sums(n_paid, tokens[:, paid].sum(axis=1))
        self.reused.add_sums(len(answers) - n_paid, tokens[:, ~paid].sum(axis=1))

    def total(self) -> Tokens:
        t = Tokens()
        for f in fields(Tokens):
            setattr(t, f.name, getattr(self.paid, f.name) + getattr(self.reused, f.name))
        return t

    def record(self, prices: Prices | None, count_name: str = "requests") -> dict:
        total = self.total().record(prices)
        out = {(count_name if k == "requests" else k): v for k, v in total.items()}
        out["paid_in_run"] = self.paid.record(prices)
        out["reused"] = self.reused.record(prices)
        return out


class CostLedger:
    """Opened when a sweep starts (what the caches hold then tells this run's work from earlier runs'), finished
    after its results table is built: adds the cost columns and returns run.json's `cost` section."""

    def __init__(self, run: SweepRun):
        self.run, self.config, self.stores = run, run.config, run.stores
        self.started = time.time()
        self.captions_before = _stored_caption_keys(run.stores)

    def finish(self, results: pl.DataFrame, cells: list[ResultCell], keys: dict[ResultCell, str]):
        """(results with COST_COLUMNS, run.json's `cost`). A costing that fails leaves the finished results as they
        are and says why in `cost.error`: the results are complete without it."""
        try:
            return self._finish(results, cells, keys)
        except Exception as exc:  # noqa: BLE001
            return results, {"error": f"cost not computed: {type(exc).__name__}: {exc}"}

    def _finish(self, results: pl.DataFrame, cells: list[ResultCell], keys: dict[ResultCell, str]):
        prices = resolve_prices(self.config)
        judge_keys: dict[str, JudgeTally] = {}  # judge label -> its answers, each counted once
        caption_keys: dict[str, dict[str, tuple]] = {}  # captioner label -> caption_key -> (tokens, reused)
        rows = []
        answers = _Answers(self.stores.judge_cache)
        inputs = None
        try:
            for cell in cells:
                labels = cell.labels()
                judged = answers.of_cell(self.stores, keys[cell], cell,
                                         judge_keys.setdefault(labels["judge"], JudgeTally(self.started)))
                cap_split, made = None, {}
                if not cell.caption.from_file:
                    if inputs is None:
                        inputs = load_inputs(self.stores, CaptionOutcome())
                    made = _caption_usage(cell, self.run, inputs, self.captions_before)
                    caption_keys.setdefault(labels["captioner"], {}).update(made)
                    cap_split = _split(made.values(), self.started)
                jp = prices.get(("judge", cell.judge.display))
                cp = prices.get(("captioner", cell.caption.captioner.display))
                rows.append({**labels, **_cell_columns(judged, jp, cap_split, cp)})
            untraced = answers.made_since(self.started, [t.keys for t in judge_keys.values()])
        finally:
            answers.close()
        if rows and results.height and all(c in results.columns for c in CELL_COLUMNS):
            table = pl.DataFrame(rows, schema_overrides=_COLUMN_TYPES, infer_schema_length=None)
            results = results.drop([c for c in COST_COLUMNS if c in results.columns]).join(
                table.select(CELL_COLUMNS + COST_COLUMNS), on=CELL_COLUMNS, how="left", maintain_order="left")
        return results, self._summary(prices, judge_keys, caption_keys, untraced, cells)

    def _summary(self, prices, judge_keys, caption_keys, untraced, cells) -> dict:
        names = {}  # judge instance name (what the cache stores) -> labels of the sweep's judges of that name
        for label, tally in judge_keys.items():
            if tally.judge is not None:
                names.setdefault(tally.judge, set()).add(label)
        # a judge no verdict row names yet (a run interrupted before its first cell was committed): its answers are
        # its by the name the cache stores (an HTTP judge's model, else the backend's name), or the only judge's
        configured = {j.display: str((j.params or {}).get("model", j.name)) for j in getattr(self.config, "judges", ())}
        for name in untraced:
            if name not in names:
                owners = {label for label, model in configured.items() if model == name}
                names[name] = owners or (set(configured) if len(configured) == 1 else set())
        judges, notes = {}, []
        for label, tally in judge_keys.items():
            split = tally.split
            extra = Tokens()
            for name, tokens in untraced.items():
                if names.get(name) == {label}:
                    for t in tokens:
                        split.paid.add(*t)
                        extra.add(*t)
            judges[label] = split.record(prices.get(("judge", label)))
            judges[label]["untraced_requests"] = extra.requests
        for name, tokens in untraced.items():
            if len(names.get(name, ())) != 1:
                notes.append(f"{len(tokens)} answers made in this run by judge {name!r} are named by no verdict row "
                             f"and could not be given to one of the sweep's judges")
        if any(j["untraced_requests"] for j in judges.values()):
            notes.append("untraced_requests: answers made in this run that no committed verdict row names (steps "
                         "whose rows carry no verdict, e.g. an extract or answer step, or cells an "
                         "interruption left uncommitted); counted in their judge's totals, not in a cell's columns")
        captioners = {label: _split(made.values(), self.started).record(prices.get(("captioner", label)), "captions")
                      for label, made in caption_keys.items()}
        parts = [*judges.values(), *captioners.values()]
        priced = [p for p in parts if p["cost_usd"] is not None]
        unpriced = sorted({f"judge {k}" for k, v in judges.items() if v["cost_usd"] is None}
                          | {f"captioner {k}" for k, v in captioners.items() if v["cost_usd"] is None})
        if unpriced:
            notes.append(f"no prices for {', '.join(unpriced)}: their cost is unknown (set `prices` in the sweep file "
                         f"or a prices file; docs/judges.md)")
        if any(c.caption.from_file for c in cells):
            notes.append("captions read from [[captions]] files were not made by capeval: no captioning cost")

        def total(key):
            if len(priced) != len(parts):
                return None
            return _round(sum(p[key]["cost_usd"] if key else p["cost_usd"] for p in parts))

        return {"currency": "USD", "prices_per": "million tokens",
                "prices": {kind + "s": {label: (p.as_dict() if p is not None else None)
                                        for (k, label), p in prices.items() if k == kind}
                           for kind in ("judge", "captioner")},
                "judges": judges, "captioners": captioners,
                "total_usd": total(None), "paid_in_run_usd": total("paid_in_run"), "reused_usd": total("reused"),
                "notes": notes}


_COLUMN_TYPES = {c: (pl.Float64 if "cost_usd" in c else pl.Int64) for c in COST_COLUMNS}


def _cell_columns(judge: Split, jp: Prices | None, captions: Split | None, cp: Prices | None) -> dict:
    j = judge.total()
    out = {"judge_requests": j.requests, "prompt_tokens": j.prompt_tokens,
           "cached_prompt_tokens": j.cached_prompt_tokens, "completion_tokens": j.completion_tokens,
           "reasoning_tokens": j.reasoning_tokens, "judge_cost_usd": _round(j.usd(jp))}
    judge_reused = judge.reused.usd(jp)
    if captions is None:  # captions from a file: capeval made none
        out |= {"caption_prompt_tokens": None, "caption_completion_tokens": None, "caption_cost_usd": None}
        cost, reused = out["judge_cost_usd"], judge_reused
    else:
        c = captions.total()
        out |= {"caption_prompt_tokens": c.prompt_tokens, "caption_completion_tokens": c.completion_tokens,
                "caption_cost_usd": _round(c.usd(cp))}
        both = out["judge_cost_usd"] is not None and out["caption_cost_usd"] is not None
        cost = j.usd(jp) + c.usd(cp) if both else None
        reused = judge_reused + captions.reused.usd(cp) if both else None
    return out | {"cost_usd": _round(cost), "cost_usd_cached": _round(reused)}


class AnswerKeys:
    """A set of answer keys kept as 16-byte digests (BLAKE2b of the key) in one sorted array: a 100,000-request
    sweep's keys as a set of Python strings were ~12 MB at the end of the run, its peak, against 1.6 MB here. Asked
    and added a batch at a time (a slice of a cell's rows). Two keys share a digest with probability ~n^2 / 2^129."""

    def __init__(self):
        self._sorted = np.empty(0, "S16")

    @staticmethod
    def digests(keys: list[str]) -> np.ndarray:
        return np.array([hashlib.blake2b(k.encode("utf-8"), digest_size=16).digest() for k in keys], "S16")

    def __len__(self) -> int:
        return len(self._sorted)

    def contains(self, digests: np.ndarray) -> np.ndarray:
        """Which of `digests` are in the set (a boolean per digest)."""
        if not len(self._sorted) or not len(digests):
            return np.zeros(len(digests), bool)
        at = np.minimum(np.searchsorted(self._sorted, digests), len(self._sorted) - 1)
        return self._sorted[at] == digests

    def add(self, digests: np.ndarray) -> None:
        new = np.unique(digests[~self.contains(digests)])
        if len(new):  # two sorted runs: the stable sort merges them in one pass
            self._sorted = np.sort(np.concatenate([self._sorted, new]), kind="stable")


class JudgeTally:
    """One judge's answers over the cells that name them, each counted once however many cells share it: the keys
    seen and their running usage, not the answers themselves (a 100,000-request sweep's answers as Python tuples
    were ~30 MB at the end of the run, its peak RSS)."""

    def __init__(self, since: float):
        self.since = since
        self.keys = AnswerKeys()
        self.split = Split()
        self.judge: str | None = None  # the judge name its first answer was stored under

    def count(self, answers: list[tuple]) -> None:
        """Count answers the tally has not counted (the caller adds their keys to `keys`)."""
        if self.judge is None and answers:
            self.judge = answers[0][0]
        self.split.add_answers(answers, self.since)


def _split(answers, since: float) -> Split:
    """answers: (judge, prompt, cached, completion, reasoning, created) tuples; created None: reused."""
    s = Split()
    s.add_answers(list(answers), since)
    return s


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 9)


class _Answers:
    """The judgment cache, read: the answers a cell's verdicts rest on, and the answers made since a time."""

    def __init__(self, cache_dir):
        path = cache_dir / JudgmentCache.FILENAME
        self.db = sqlite3.connect(path, timeout=60.0) if path.is_file() else None
        self._policies: dict = {}

    def close(self) -> None:
        if self.db is not None:
            self.db.close()

    def of_cell(self, stores: RunStores, cell_key: str, cell: ResultCell, tally: JudgeTally) -> Split:
        """The usage of every attempt of every verdict row of the cell, each answer once, split by whether it was
        stored since the tally's `since` (paid by this run); each answer is also given to its judge's `tally`. An answer
        missing from the cache (the cache was removed) counts with the row's own tokens, as reused."""
        columns = ["request_key", "attempt", "judge", "prompt_tokens", "cached_prompt_tokens", "completion_tokens",
                   "reasoning_tokens"]
        split = Split()
        temperature = self._reask_temperature(cell)
        # answers counted for this cell (the keys, not the answers: see JudgeTally); a judge's first cell counts
        # the same keys as its tally, so they share one set
        seen = tally.keys if not len(tally.keys) else AnswerKeys()
        # SLICE_ROWS rows at a time read from the committed file, column by column, not the reply and detail texts it
        # never reads: a cell may have hundreds of thousands, and its key columns and Python lists of all its keys
        # and tokens at once were tens of MB at the end of a big run
        for batch in stored_verdict_batches(stores, cell_key, columns, SLICE_ROWS):
            keys, attempts, judge, prompt, cached, completion, reasoning = (batch.column(c).to_pylist()
                                                                             for c in columns)
            asked, final = {}, {}
            for i, (request_key, attempt) in enumerate(zip(keys, attempts)):
                if attempt is None:  # never asked (no caption, an upstream step failed)
                    continue
                for a in range(int(attempt) + 1):
                    key = attempt_key(request_key, a, temperature)
                    asked[key] = None
                if prompt[i] is not None:  # the row's tokens are its last attempt's
                    final[key] = i
            asked_keys = list(asked)
            found = self._lookup([k for k, s in zip(asked_keys, seen.contains(AnswerKeys.digests(asked_keys)))
                                  if not s])
            missing = [k for k in final if k not in found]
            for k, s in zip(missing, seen.contains(AnswerKeys.digests(missing))):
                if not s:
                    i = final[k]
                    found[k] = (judge[i], prompt[i], cached[i], completion[i], reasoning[i], None)
            digests = AnswerKeys.digests(list(found))
            new_to_judge = ~tally.keys.contains(digests)  # before `seen` takes them: they may be one set
            seen.add(digests)
            if tally.keys is not seen:
                tally.keys.add(digests[new_to_judge])
            answers = list(found.values())
            split.add_answers(answers, tally.since)
            tally.count([answer for answer, new in zip(answers, new_to_judge) if new])
        return split

    def _reask_temperature(self, cell):
        name = cell.protocol.name
        key = (name, repr(sorted(cell.protocol.params.items())))
        if key not in self._policies:
            self._policies[key] = lookup("protocol", name).judging_policy(**cell.protocol.params).reask_temperature
        return self._policies[key]

    def _lookup(self, keys: list[str]) -> dict[str, tuple]:
        out: dict[str, tuple] = {}
        if self.db is None:
            return out
        for i in range(0, len(keys), _CHUNK):
            chunk = keys[i : i + _CHUNK]
            sql = ("SELECT request_key, judge, prompt_tokens, cached_prompt_tokens, completion_tokens, "
                   f"reasoning_tokens, created FROM judgments WHERE request_key IN ({','.join('?' * len(chunk))})")
            for row in self.db.execute(sql, chunk):
                out[row[0]] = row[1:]
        return out

    def made_since(self, since: float, traced: list[AnswerKeys]) -> dict[str, list[tuple]]:
        """judge name -> [(prompt, cached, completion, reasoning)] of answers stored since `since` that no cell's
        verdict rows name (whose key is in none of `traced`)."""
        out: dict[str, list[tuple]] = {}
        if self.db is None:
            return out
        sql = ("SELECT request_key, judge, prompt_tokens, cached_prompt_tokens, completion_tokens, reasoning_tokens "
               "FROM judgments WHERE created >= ?")
        rows = self.db.execute(sql, (since,))
        while batch := rows.fetchmany(SLICE_ROWS):
            digests = AnswerKeys.digests([r[0] for r in batch])
            named = np.zeros(len(batch), bool)
            for keys in traced:
                named |= keys.contains(digests)
            for row, known in zip(batch, named):
                if not known:
                    out.setdefault(row[1], []).append(row[2:])
        return out


def _stored_caption_keys(stores: RunStores) -> set[str]:
    import pyarrow.compute as pc

    t = stores.captions.read(["caption_key", "error"])
    if t.num_rows == 0:
        return set()
    return set(t.filter(pc.is_null(t.column("error"))).column("caption_key").to_pylist())  # failed rows: not made


def _caption_usage(cell: ResultCell, run: SweepRun, inputs: CellInputs, before: set[str]) -> dict[str, tuple]:
    """caption_key -> (captioner, prompt, 0, completion, reasoning, created-or-None) of the cell's captions."""
    captions, _ = cell_captions(cell, run, inputs)
    out = {}
    for r in captions.select(["caption_key", "captioner", "text", "prompt_tokens", "n_tokens",
                              "reasoning_tokens"]).to_pylist():
        if r["text"] is None:
            continue
        reasoning = r["reasoning_tokens"] or 0
        made_now = None if r["caption_key"] in before else float("inf")  # made in this run: "created" after start
        out[r["caption_key"]] = (r["captioner"], r["prompt_tokens"], 0, (r["n_tokens"] or 0) + reasoning, reasoning,
                                 made_now)
    return out
