"""JudgeScheduler: several cells through one window; each cell's table equals run_judging alone, callbacks come as
cells complete, identical requests of two cells are sent once, rows go out in caption order across cells."""

from __future__ import annotations

from _judging_backends import ScriptedJudge, StreamingScriptedJudge
from test_judging_streaming import _vidcapbench

from capeval.engine.judging.runner import run_judging
from capeval.engine.judging.scheduler import JudgeScheduler


def _same(a, b):
    return a.drop_columns(["latency_s"]).equals(b.drop_columns(["latency_s"]))


def test_cells_share_one_window_and_each_equals_its_own_run(tmp_path):
    p, small = _vidcapbench(n_items=6, n_captions=2)
    _, big = _vidcapbench(n_items=30, n_captions=5, seeds=(0, 1))
    alone = {name: run_judging(reqs, ScriptedJudge(), cache_dir=tmp_path / f"alone-{name}", protocol=p,
                               progress=False) for name, reqs in (("small", small), ("big", big))}
    judge = StreamingScriptedJudge(max_delay_s=0.003)
    sched = JudgeScheduler(judge, tmp_path / "shared", max_in_flight=6)
    completed = []
    sched.add(big, p, name="big", on_complete=lambda n, t, s: completed.append((n, t.take(), s, len(judge.taken))))
    sched.add(small, p, name="small", on_complete=lambda n, t, s: completed.append((n, t.take(), s,
                                                                                   len(judge.taken))))
    sched.add(small, p, name="small-again")  # the same requests again: no callback, returned by run()
    results = sched.run()
    assert [c[0] for c in completed] == ["small", "big"]  # the small cell is delivered while the big one runs
    assert completed[0][3] < completed[1][3]
    by_name = {n: t for n, t, _, _ in completed}
    assert _same(by_name["small"], alone["small"]) and _same(by_name["big"], alone["big"])
    assert _same(results["small-again"][0], alone["small"])
    # one answer and one score request per distinct first-step request of all cells (some of "small" are also in
    # "big", and "small-again" repeats "small"): nothing is sent twice
    distinct = set(small["request_key"].to_pylist()) | set(big["request_key"].to_pylist())
    keys = [r.key for r in judge.taken]
    assert len(keys) == len(set(keys)) == 2 * len(distinct) and len(distinct) > 60
    summaries = {n: s for n, _, s, _ in completed}
    assert summaries["small"].requests == 6 and summaries["big"].requests == 60
    # first-step requests go out caption by caption across the cells (captions k0..k4 shared by both tables)
    firsts = [r.fields["caption"] for r in judge.taken if r.meta["step"] == "answer"]
    assert sum(1 for a, b in zip(firsts, firsts[1:]) if a != b) == 4


def test_a_completion_callback_holds_the_only_reference_to_the_verdict_table_it_takes(tmp_path):
    """The callee can let go of the rows it has written: once it drops the table it took, nothing between the
    judging loop and the callback keeps it alive (a sweep narrows a big cell's table to its metric columns)."""
    import gc
    import weakref

    import pytest

    p, reqs = _vidcapbench(n_items=8, n_captions=2)
    sched = JudgeScheduler(StreamingScriptedJudge(max_delay_s=0.0), tmp_path, max_in_flight=4)
    seen = {}

    def complete(name, verdicts, summary):
        table = verdicts.take()
        seen["rows"], seen["summary_rows"] = table.num_rows, summary.requests
        ref = weakref.ref(table)
        del table
        gc.collect()
        seen["alive"] = ref() is not None
        with pytest.raises(RuntimeError, match="taken already"):
            verdicts.take()

    sched.add(reqs, p, name="cell", on_complete=complete)
    sched.run()
    assert seen == {"rows": reqs.num_rows, "summary_rows": reqs.num_rows, "alive": False}
