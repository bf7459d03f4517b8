"""Streamed cells (JudgeScheduler.add(sealed=False) / extend / seal, fed by a source while judging runs): the verdict
table equals the one-shot table of all the requests, whatever order the parts arrive in and however answers
interleave; the loop waits for parts instead of ending; a cell completes only once sealed."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from _judging_backends import StreamingScriptedJudge
from test_judging_streaming import _vidcapbench, _vidcapbench_inputs

from capeval.engine.judging import cells
from capeval.engine.judging.cells import Cell
from capeval.engine.judging.runner import run_judging
from capeval.engine.judging.scheduler import JudgeScheduler
from capeval.engine.protocols.base import REQUESTS_WITH_CONTEXT
from capeval.engine.registry import lookup
from capeval.engine.schemas import VERDICTS, conform


def _same(a, b):
    return a.drop_columns(["latency_s"]).equals(b.drop_columns(["latency_s"]))


class _PartsSource:
    """Adds one part per poll after `gap_s` (as captions finishing one batch of videos at a time would), then seals."""

    def __init__(self, sched, name, parts, gap_s=0.01):
        self.sched, self.name, self.parts, self.gap_s = sched, name, list(parts), gap_s
        self.next_at = time.monotonic() + gap_s
        self.polls_waiting = 0
        self.open = True

    def poll(self, timeout):
        if timeout > 0:
            self.polls_waiting += 1
            time.sleep(min(timeout, max(0.0, self.next_at - time.monotonic())))
        if not self.open or time.monotonic() < self.next_at:
            return
        self.sched.extend(self.name, self.parts.pop(0))
        self.next_at = time.monotonic() + self.gap_s
        if not self.parts:
            self.sched.seal(self.name)
            self.open = False


def _parts_by_video(build, items, captions, n_parts, seed):
    """Requests built per random group of videos (each group's items with its captions), groups in random order."""
    videos = sorted(set(captions["video_id"].to_pylist()))
    random.Random(seed).shuffle(videos)
    groups = [videos[i::n_parts] for i in range(n_parts)]
    parts = []
    for g in groups:
        owned = pc.is_in(items["video_id"], value_set=pa.array(g))
        parts.append(build(items.filter(owned), captions.filter(pc.is_in(captions["video_id"], value_set=pa.array(g)))))
    return parts


def _streamed(tmp_path, protocol, parts, *, params=None, seed=0, first=None):
    judge = StreamingScriptedJudge(max_delay_s=0.004, seed=seed)
    sched = JudgeScheduler(judge, tmp_path, max_in_flight=5)
    done = []
    sched.add(first if first is not None else REQUESTS_WITH_CONTEXT.empty_table(), protocol, name="cell",
              sealed=False, protocol_params=params, on_complete=lambda n, t, s: done.append((t.take(), s)))
    source = _PartsSource(sched, "cell", parts)
    sched.run(source=source)
    assert len(done) == 1 and not source.open
    return done[0][0], done[0][1], source


def test_streamed_multistep_cell_equals_one_shot(tmp_path):
    """VidCapBench (answer -> score per unit) with two judge seeds: parts of random video groups in random order."""
    p, whole = _vidcapbench(n_items=30, n_captions=6, seeds=(0, 1))
    one_shot = run_judging(whole, StreamingScriptedJudge(max_delay_s=0.002), cache_dir=tmp_path / "one",
                           protocol=p, progress=False, max_in_flight=5)
    items, caps = _vidcapbench_inputs(n_items=30, n_captions=6)
    for seed in (1, 2):
        parts = _parts_by_video(lambda i, c: p.build_requests(i, c, judge="scripted-judge", judge_revision="r1",
                                                               seeds=(0, 1)), items, caps, 4, seed)
        assert sum(t.num_rows for t in parts) == whole.num_rows
        table, summary, source = _streamed(tmp_path / f"s{seed}", p, parts, seed=seed)
        assert _same(table, one_shot), "streamed parts changed the verdict table"
        assert summary.requests == one_shot.num_rows
        assert source.polls_waiting > 0  # the loop waited for parts instead of ending


def test_streamed_capability_per_item_captions_equal_one_shot(tmp_path, shared_data):
    """CAPability's captions are matched by item_id (one caption per item): parts by those ids."""
    from capeval.engine.protocols.capability.release import load_captions, load_items

    items = load_items(shared_data / "capability" / "annotations", tasks=("object_color", "event"))
    items = pa.concat_tables([items.filter(pc.equal(items["task"], t)).slice(0, 20) for t in ("object_color", "event")])
    caps = load_captions(shared_data / "capability" / "captions" / "qwen2.5vl_7b", items)
    p = lookup("protocol", "capability")

    def build(i, c):
        return p.build_requests(i, c, judge="scripted-judge", judge_revision="r1")

    whole = build(items, caps)
    one_shot = run_judging(whole, StreamingScriptedJudge(max_delay_s=0.002), cache_dir=tmp_path / "one",
                           protocol=p, progress=False, max_in_flight=5)
    ids = caps["video_id"].to_pylist()
    random.Random(3).shuffle(ids)
    parts = []
    for g in (ids[0::3], ids[1::3], ids[2::3]):
        keep = pa.array(g)
        owned = pc.or_(pc.is_in(items["item_id"], value_set=keep), pc.is_in(items["video_id"], value_set=keep))
        parts.append(build(items.filter(owned), caps.filter(pc.is_in(caps["video_id"], value_set=keep))))
    assert sum(t.num_rows for t in parts) == whole.num_rows
    table, _, _ = _streamed(tmp_path / "s", p, parts, first=parts.pop(0))
    assert _same(table, one_shot)


def test_unsealed_cell_never_completes_early_and_empty_parts_are_fine(tmp_path):
    p, whole = _vidcapbench(n_items=6, n_captions=2)
    empty = REQUESTS_WITH_CONTEXT.empty_table()
    table, summary, _ = _streamed(tmp_path, p, [empty, whole, empty])
    assert table.num_rows == whole.num_rows and summary.requests == whole.num_rows



def test_run_judging_reads_a_request_file_in_batches(tmp_path):
    """A request table streamed from Parquet in record batches gives the table's verdicts, in its order."""
    import pyarrow.parquet as pq

    p, whole = _vidcapbench(n_items=40, n_captions=8, seeds=(0, 1))
    one_shot = run_judging(whole, StreamingScriptedJudge(max_delay_s=0.002), cache_dir=tmp_path / "one",
                           protocol=p, progress=False, max_in_flight=5)
    path = tmp_path / "requests.parquet"
    pq.write_table(whole, path, row_group_size=10)  # every row group holds whole (item, caption) units
    batches = pq.ParquetFile(path).iter_batches(batch_size=10)
    streamed = run_judging(batches, StreamingScriptedJudge(max_delay_s=0.002, seed=5), cache_dir=tmp_path / "s",
                           protocol=p, progress=False, max_in_flight=5)
    assert _same(streamed, one_shot)


def test_a_big_streamed_cell_is_put_in_order_without_a_second_copy_of_its_rows(tmp_path):
    """The end of a cell received in parts puts its verdict rows in request order a column at a time, letting each
    unordered column go once taken: Arrow's memory at the end peaks at about one copy of the rows, not two (the
    whole table taken while its chunks were still held). Measured on a proxy of Arrow's default pool that sees every
    allocation of the judging (the parts' requests were built before it)."""
    p, whole = _vidcapbench(n_items=5000, n_captions=500)
    items, caps = _vidcapbench_inputs(n_items=5000, n_captions=500)
    parts = _parts_by_video(lambda i, c: p.build_requests(i, c, judge="scripted-judge", judge_revision="r1",
                                                           seeds=(0,)), items, caps, 6, seed=3)
    parts = [REQUESTS_WITH_CONTEXT.empty_table()] + [conform(t, REQUESTS_WITH_CONTEXT) for t in parts]
    previous = pa.default_memory_pool()
    pool = pa.proxy_memory_pool(previous)
    seen = {}

    def complete(name, verdicts, summary):
        seen["peak"], seen["bytes"] = pool.max_memory(), verdicts.take().nbytes

    pa.set_memory_pool(pool)
    try:
        judge = StreamingScriptedJudge(max_delay_s=0.0, seed=1)
        sched = JudgeScheduler(judge, tmp_path, max_in_flight=64)
        sched.add(parts[0], p, name="cell", sealed=False, on_complete=complete)
        source = _PartsSource(sched, "cell", parts[1:], gap_s=0.0)
        sched.run(source=source)
    finally:
        pa.set_memory_pool(previous)
    assert seen["bytes"] > 1_000_000, seen  # big enough for the copies to show
    # a second copy of the rows at the end reaches 2x and more; one copy and a column in flight stay well below
    assert seen["peak"] < 1.6 * seen["bytes"], seen


def _mapping_kb(address: int) -> int | None:
    """Resident kB of this process's mapping that starts at `address` (None: nothing mapped there)."""
    inside = False
    with open("/proc/self/smaps") as fh:
        for line in fh:
            first = line.split(" ", 1)[0]
            if "-" in first and not first.endswith(":"):
                inside = int(first.split("-")[0], 16) == address
            elif inside and line.startswith("Rss:"):
                return int(line.split()[1])
    return None


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="reads the process's mappings from Linux's /proc")
def test_a_spooled_cells_rows_are_copied_out_of_a_mapping_a_column_at_a_time(tmp_path, monkeypatch):
    """A cell's spooled verdict rows are read in place from a mapping of the spool file and copied out of it a column
    at a time, the mapping's pages handed back after each: the process never holds the whole spool in memory beside
    the ordered copy (reading the file into memory kept every chunk read until its last column was put in order:
    two copies of a big cell's rows at the end). The mapping is gone once the table is made, and the table is the
    one a cell that kept its rows in memory makes."""
    p, whole = _vidcapbench(n_items=5000, n_captions=500)
    items, caps = _vidcapbench_inputs(n_items=5000, n_captions=500)
    parts = _parts_by_video(lambda i, c: p.build_requests(i, c, judge="scripted-judge", judge_revision="r1",
                                                           seeds=(0,)), items, caps, 6, seed=3)
    parts = [REQUESTS_WITH_CONTEXT.empty_table()] + [conform(t, REQUESTS_WITH_CONTEXT) for t in parts]
    kept = run_judging(whole, StreamingScriptedJudge(max_delay_s=0.0, seed=1), cache_dir=tmp_path / "kept",
                       protocol=p, progress=False, max_in_flight=64)
    monkeypatch.setattr(Cell, "CHUNK_ROWS", 500)
    resident = []  # (before, after) each hand-back: kB of the mapping resident
    seen = {}
    drop_pages = cells._MappedSpool.drop_pages

    def watched(self):
        seen.setdefault("address", self.buffer.address)
        before = _mapping_kb(seen["address"])
        drop_pages(self)
        resident.append((before, _mapping_kb(seen["address"])))

    monkeypatch.setattr(cells._MappedSpool, "drop_pages", watched)

    def complete(name, verdicts, summary):
        seen["table"], seen["mapping_after"] = verdicts.take(), _mapping_kb(seen["address"])

    judge = StreamingScriptedJudge(max_delay_s=0.0, seed=1)
    sched = JudgeScheduler(judge, tmp_path / "spooled", max_in_flight=64)
    sched.add(parts[0], p, name="cell", sealed=False, on_complete=complete)
    sched.run(source=_PartsSource(sched, "cell", parts[1:], gap_s=0.0))
    assert _same(seen["table"], kept)
    assert seen["mapping_after"] is None  # unmapped (the unnamed file goes with it)
    table_kb = seen["table"].nbytes / 1024
    assert table_kb > 1000 and len(resident) == len(VERDICTS), (table_kb, resident)
    assert all(after == 0 for _, after in resident), resident  # every page handed back after each column
    # the rows came from it (how many pages one column's copy maps depends on the kernel's fault-around: in this
    # test's small chunks most of the file; in a big cell's 8,192-row chunks about the column)
    assert sum(before for before, _ in resident) > 0.5 * table_kb, (table_kb, resident)


class _PoolWatchingJudge(StreamingScriptedJudge):
    """Reads Arrow's pool as it takes each request: what the loop holds while the cell is judged."""

    def __init__(self, pool, **kwargs):
        super().__init__(**kwargs)
        self.pool, self.most = pool, 0

    def _one(self, request, delay):
        self.most = max(self.most, self.pool.bytes_allocated())
        return super()._one(request, delay)


def test_a_big_cells_finished_rows_wait_on_disk_while_the_rest_is_judged(tmp_path, monkeypatch):
    """A cell's full chunks of finished verdict rows go to its spool file: while the cell is judged, Arrow's memory
    holds about a chunk of them, not every finished row (read on a proxy of Arrow's default pool as the judge takes
    each request); the verdict table at the end is the one a cell that kept its rows in memory makes."""
    p, reqs = _vidcapbench(n_items=1500, n_captions=150)
    kept = run_judging(reqs, StreamingScriptedJudge(max_delay_s=0.0, seed=1), cache_dir=tmp_path / "kept",
                       protocol=p, progress=False, max_in_flight=16)
    assert kept.num_rows < Cell.CHUNK_ROWS  # one chunk: nothing spooled
    monkeypatch.setattr(Cell, "CHUNK_ROWS", 200)
    previous = pa.default_memory_pool()
    pool = pa.proxy_memory_pool(previous)
    pa.set_memory_pool(pool)
    try:
        judge = _PoolWatchingJudge(pool, max_delay_s=0.0, seed=1)
        spooled = run_judging(reqs, judge, cache_dir=tmp_path / "spooled", protocol=p, progress=False,
                              max_in_flight=16)
        same = _same(spooled, kept)
        del spooled  # its buffers are the proxy's: gone before it is
    finally:
        pa.set_memory_pool(previous)
    assert same
    assert kept.nbytes > 400_000, kept.nbytes  # big enough for the rows held to show
    # rows kept in memory reach nearly the whole table by the last requests; spooled, a chunk and a few in flight
    assert judge.most < 0.25 * kept.nbytes, (judge.most, kept.nbytes)
