"""report/ and metrics/ learn protocols only through the protocol interface (capeval.engine.protocols.base.JudgeProtocol):
a protocol registered here, at test time, gets its leaderboard (its headline), its paired comparison (its
paired_spec), its sample-browser labels and its metric-name marker without any engine file naming it; a protocol
with no paired statistic is skipped by compare with a note; the builtins keep the markers they had."""

from __future__ import annotations

import uuid
from enum import IntEnum

import numpy as np
import polars as pl
import pytest

from _verdicts import random_codes, verdict_rows
from capeval.engine import registry
from capeval.engine.metrics.core import count_table, metrics_frame
from capeval.engine.metrics.paired import PairedSpec, code_stats
from capeval.engine.protocols.base import JudgeProtocol

A = {"captioner": "m1", "prompt_id": "p", "frame_spec": "uniform:8"}
B = {"captioner": "m2", "prompt_id": "p", "frame_spec": "uniform:8"}


class TallyVerdict(IntEnum):
    MISS = 0
    HIT = 1


def hit_share(counts):
    c = np.asarray(counts, dtype=np.float64)
    return c[..., 1] / c.sum(-1)  # rows without a verdict (the last column) count against the caption


def miss_share(counts):
    c = np.asarray(counts, dtype=np.float64)
    return c[..., 0] / c.sum(-1)


class TallyProtocol(JudgeProtocol):
    """A protocol only this test knows: HIT / MISS per question, headline hit_share then miss_share."""

    version = "1"
    codes = (TallyVerdict,)
    headline = ("hit_share", "miss_share")

    def paired_spec(self, mode):
        return PairedSpec(code_stats(len(TallyVerdict)), len(TallyVerdict) + 1,
                          {"hit_share": hit_share, "miss_share": miss_share})


class SilentProtocol(TallyProtocol):
    """Declares no paired statistic (the base class's paired_spec)."""

    headline = ("silent_share",)

    def paired_spec(self, mode):
        return JudgeProtocol.paired_spec(self, mode)


def _registered(cls):
    protocol = cls()
    protocol.name = f"test_{cls.__name__.lower()}_{uuid.uuid4().hex[:8]}"
    registry.register("protocol", protocol.name)(protocol)
    return protocol


@pytest.fixture
def tally():
    protocol = _registered(TallyProtocol)
    yield protocol
    registry._REGISTRIES["protocol"].pop(protocol.name)  # the registry has no unregister: tests only


@pytest.fixture
def silent():
    protocol = _registered(SilentProtocol)
    yield protocol
    registry._REGISTRIES["protocol"].pop(protocol.name)


def _verdicts(name: str) -> pl.DataFrame:
    codes_a = random_codes(25, 4, [0.3, 0.6, 0.1], seed=7)  # code 2 is outside the code set: no verdict
    codes_b = random_codes(25, 4, [0.6, 0.3, 0.1], seed=8)
    return pl.concat([verdict_rows(A, [[c if c < 2 else -1 for c in v] for v in codes_a], protocol=name),
                      verdict_rows(B, [[c if c < 2 else -1 for c in v] for v in codes_b], protocol=name)])


def _metrics(verdicts: pl.DataFrame, name: str) -> pl.DataFrame:
    """The long metrics table such a protocol writes: one more metric than its headline, in another order."""
    table = count_table(verdicts, ["captioner", "prompt_id", "frame_spec"], len(TallyVerdict))
    frame = metrics_frame(table, {"n_share": lambda c: np.asarray(c, dtype=float).sum(-1) * 0 + 1,
                                  "miss_share": miss_share, "hit_share": hit_share}, n_resamples=100)
    return frame.with_columns(pl.lit(name).alias("protocol"))


def test_a_protocol_registered_at_test_time_gets_its_leaderboard(tally):
    from capeval.engine.report.metrics_text import format_table, guess_protocol
    from capeval.engine.report.leaderboard import leaderboard

    metrics = _metrics(_verdicts(tally.name), tally.name)
    lb = leaderboard(metrics)
    assert lb.protocol == tally.name and lb.metrics == ["hit_share", "miss_share"]  # its headline, its order
    for r in metrics.filter(pl.col("metric") == "hit_share").iter_rows(named=True):
        row = lb.table.filter(pl.col("captioner") == r["captioner"]).row(0, named=True)
        assert row["hit_share"] == pytest.approx(r["value"]) and row["hit_share_low"] == pytest.approx(r["ci_low"])
    # a headline metric only this protocol declares tells a table without a protocol column apart
    assert guess_protocol(metrics.drop("protocol")) == tally.name
    assert format_table(metrics.drop("protocol")).startswith(f"== {tally.name} leaderboard")


def test_a_protocol_registered_at_test_time_gets_a_paired_comparison(tally):
    from capeval.engine.report.compare import compare_run

    v = _verdicts(tally.name)
    out = compare_run(v, n_resamples=200, seed=1)
    assert set(out["metric"]) == {"hit_share", "miss_share"} and set(out["protocol"]) == {tally.name}
    row = out.filter(pl.col("metric") == "hit_share").row(0, named=True)
    # the point values: the spec's function of each system's code counts over the shared videos, in percent
    for side, system in (("a_value", "m1"), ("b_value", "m2")):
        codes = v.filter(pl.col("captioner") == system)["verdict"].to_numpy()
        assert row[side] == pytest.approx(100 * (codes == 1).sum() / codes.size)
    assert row["diff"] == pytest.approx(row["a_value"] - row["b_value"]) and row["n_videos"] == 25
    assert row["ci_low"] < row["diff"] < row["ci_high"] and row["p_holm"] is not None


def test_a_protocol_registered_at_test_time_gets_its_verdict_labels(tally):
    from capeval.engine.report.html import _verdict_labels

    assert _verdict_labels(tally.name) == {0: "MISS", 1: "HIT"}
    assert _verdict_labels("lvcap") == {}  # several code sets: a code alone names nothing
    assert _verdict_labels("no_such_protocol") == {}


def test_a_protocol_without_a_paired_statistic_is_skipped_with_a_note(tally, silent):
    from capeval.engine.report.compare import compare_run, format_comparison

    v = pl.concat([_verdicts(silent.name), _verdicts(tally.name)])
    out = compare_run(v, n_resamples=100)
    note = out.filter(pl.col("protocol") == silent.name)
    assert note.height == 1 and note["metric"][0] == "-" and note["p_value"][0] is None
    assert "declares no paired statistic" in note["warning"][0]
    assert set(out.filter(pl.col("protocol") == tally.name)["metric"]) == {"hit_share", "miss_share"}
    assert out.filter(pl.col("protocol") == tally.name)["p_holm"].is_not_null().all()
    text = format_comparison(out)
    assert f"== {silent.name} (d, judge local): not compared" in text and "Holm" in text


def _builtin_frame(protocol: str) -> pl.DataFrame:
    """The metrics table the builtin protocol's own compute_metrics writes, without the protocol column."""
    import importlib

    compute = importlib.import_module(f"capeval.engine.protocols.{protocol}.metrics").compute_metrics
    rng = np.random.default_rng(4)
    if protocol == "lvcap":
        frames = []
        for system in (A, B):
            for step, n in (("entail_p", 3), ("entail_r", 3), ("scene", 2)):
                rows = verdict_rows(system, rng.choice(n, size=(6, 3)).tolist(), protocol=protocol, task=step)
                frames.append(rows.with_columns(pl.lit(step).alias("step"),
                                                pl.concat_str([pl.lit(step), pl.col("item_id")]).alias("item_id")))
        v = pl.concat(frames)
    else:
        n_codes = {"capquiz": 3, "capability": 3, "vidcapbench": 4, "vcinspector": 5}[protocol]
        step = "score" if protocol == "vidcapbench" else None
        v = pl.concat([verdict_rows(s, rng.choice(n_codes, size=(6, 3)).tolist(), protocol=protocol)
                       for s in (A, B)]).with_columns(pl.lit(step, dtype=pl.String).alias("step"))
    frame = compute(v.drop("dataset", "protocol_name"), n_resamples=0)
    return frame.drop("protocol") if "protocol" in frame.columns else frame


@pytest.mark.parametrize("protocol", ["capquiz", "capability", "vidcapbench", "vcinspector", "lvcap"])
def test_builtin_metrics_tables_are_told_apart_by_their_headlines(protocol):
    from capeval.engine.report.metrics_text import guess_protocol, metric_markers

    assert guess_protocol(_builtin_frame(protocol)) == protocol
    markers = metric_markers()
    # the names that marked each builtin before the markers came from the registry still do, except a name another
    # benchmark's headline now shares: "Acc" is VDC's too, so it marks neither (VidCapBench keeps Pre, Cov, Con)
    assert "Acc" not in markers
    for metric, owner in {"CapF1": "capquiz", "hit_rate": "capability", "Pre": "vidcapbench", "S_e": "lvcap",
                          "S_s": "lvcap", "mean_score": "vcinspector"}.items():
        assert markers[metric] == owner
