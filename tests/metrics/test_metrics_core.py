"""count_table / metrics_frame against direct Polars and numpy computations."""

import numpy as np
import polars as pl
import pyarrow as pa
import pytest

from capeval.engine.metrics.core import code_share, count_table, f1, mean_code_value, metrics_frame, safe_ratio
from capeval.engine.schemas import NO_VERDICT, conform, metrics_schema
from capeval.kernels.bootstrap import cluster_bootstrap, percentile_ci


@pytest.fixture(scope="module")
def verdicts() -> pl.DataFrame:
    rng = np.random.default_rng(0)
    n = 6000
    frame = pl.DataFrame({
        "video_id": [f"v{i}" for i in rng.integers(0, 120, n)],
        "captioner": rng.choice(["m1", "m2", "m3"], n),
        "task": rng.choice(["color", "count", "scene"], n),
        "verdict": rng.choice([NO_VERDICT, 0, 1, 2], n, p=[0.05, 0.3, 0.45, 0.2]).astype(np.int8),
    })
    # a group whose rows all lack a verdict
    lost = pl.DataFrame({"video_id": ["v1", "v2"], "captioner": ["m4", "m4"], "task": ["color", "color"],
                         "verdict": pl.Series([NO_VERDICT, NO_VERDICT], dtype=pl.Int8)})
    return pl.concat([frame, lost])


def precision(c):
    return safe_ratio(c[..., 1], c[..., 1] + c[..., 2])


def hit(c):
    return code_share(c, [1, 2], [0, 1, 2])


def test_count_table_matches_polars_group_by(verdicts):
    table = count_table(verdicts.to_arrow(), ["captioner", "task"], n_codes=3)
    assert table.groups.columns == ["captioner", "task"] and table.n_groups == 10 and table.n_clusters == 120
    ref = verdicts.group_by(["captioner", "task", "video_id", "verdict"]).len()
    videos = table.clusters["video_id"].to_list()
    rebuilt = np.zeros_like(table.counts)
    keys = {tuple(r): g for g, r in enumerate(table.groups.iter_rows())}
    for cap, task, vid, code, k in ref.iter_rows():
        rebuilt[videos.index(vid), keys[(cap, task)], code if code >= 0 else 3] += k
    np.testing.assert_array_equal(table.counts, rebuilt)
    assert table.totals.sum() == verdicts.height


def test_metrics_frame_values_n_and_ci(verdicts):
    table = count_table(verdicts, ["captioner", "task"], n_codes=3)
    frame = metrics_frame(table, {"precision": precision, "hit": hit}, n_resamples=300, seed=7)
    schema = metrics_schema(["captioner", "task"])
    assert frame.columns == schema.names
    assert conform(frame.to_arrow(), schema).num_rows == frame.height  # casts cleanly to the shared schema
    assert frame.height == 2 * table.n_groups
    row = frame.filter((pl.col("captioner") == "m2") & (pl.col("task") == "scene"))
    sub = verdicts.filter((pl.col("captioner") == "m2") & (pl.col("task") == "scene"))
    pos, neg = (sub["verdict"] == 1).sum(), (sub["verdict"] == 2).sum()
    coded = (sub["verdict"] >= 0).sum()
    p = row.filter(pl.col("metric") == "precision")
    assert p["value"][0] == pytest.approx(100 * pos / (pos + neg))
    assert p["n"][0] == coded and p["n_no_verdict"][0] == sub.height - coded
    assert p["ci_low"][0] < p["value"][0] < p["ci_high"][0]
    # CI is the percentile interval of the cluster bootstrap of this group alone
    g = table.groups.with_row_index().filter((pl.col("captioner") == "m2") & (pl.col("task") == "scene"))["index"][0]
    samples = cluster_bootstrap(table.counts[:, g], precision, 300, seed=7)
    low, high = percentile_ci(samples)
    assert p["ci_low"][0] == pytest.approx(100 * low) and p["ci_high"][0] == pytest.approx(100 * high)
    lost = frame.filter(pl.col("captioner") == "m4")
    assert lost["value"].is_nan().all() and (lost["n"] == 0).all() and (lost["n_no_verdict"] == 2).all()
    assert frame.equals(metrics_frame(table, {"precision": precision, "hit": hit}, n_resamples=300, seed=7))


def test_average_rows_use_the_same_replicates(verdicts):
    table = count_table(verdicts, ["captioner", "task"], n_codes=3)
    frame = metrics_frame(table, {"precision": precision}, n_resamples=200, seed=1, scale=1.0,
                          average_over="task", average_label="avg")
    avg = frame.filter(pl.col("task") == "avg").sort("captioner")
    assert avg["captioner"].to_list() == ["m1", "m2", "m3", "m4"]
    m1 = frame.filter((pl.col("captioner") == "m1") & (pl.col("task") != "avg"))
    assert avg["value"][0] == pytest.approx(m1["value"].mean())
    assert avg["n"][0] == m1["n"].sum()
    members = [i for i, c in enumerate(table.groups["captioner"]) if c == "m1"]
    samples = cluster_bootstrap(table.counts[:, members], lambda s: precision(s).mean(axis=1), 200, seed=1)
    low, high = percentile_ci(samples)
    assert avg["ci_low"][0] == pytest.approx(low) and avg["ci_high"][0] == pytest.approx(high)
    assert avg["value"][3] is None and avg["ci_low"][3] is None  # m4 has no verdicts at all: null, not nan


def test_strata_one_cluster_and_no_bootstrap():
    frame = pl.DataFrame({"video_id": ["a", "a", "a"], "model": ["x", "x", "x"], "verdict": [1, 0, 1]})
    one = metrics_frame(count_table(frame, ["model"], 2), {"acc": lambda c: code_share(c, [1], [0, 1])},
                        n_resamples=100, scale=1.0)
    assert one["value"][0] == pytest.approx(2 / 3) and one["ci_low"][0] == one["ci_high"][0] == one["value"][0]
    none = metrics_frame(count_table(frame, ["model"], 2), {"acc": lambda c: code_share(c, [1], [0, 1])},
                         n_resamples=0)
    assert np.isnan(none["ci_low"][0])
    strat = pl.DataFrame({"video_id": ["a", "b", "a", "c"], "split": ["s1", "s1", "s2", "s2"],
                          "model": ["x"] * 4, "verdict": [1, 0, 1, 1]})
    table = count_table(strat, ["model"], 2, strata_columns=["split"])
    assert table.n_clusters == 4 and table.strata.tolist() == [0, 0, 1, 1]


def test_helpers():
    np.testing.assert_array_equal(safe_ratio([1, 2], [0, 4]), [np.nan, 0.5])
    np.testing.assert_allclose(f1([0.5, 0.0, np.nan], [1.0, 0.0, 0.5]), [2 / 3, 0.0, np.nan])
    assert mean_code_value(np.array([1, 0, 3, 9]), [0, 1, 5]) == pytest.approx(15 / 4)


def test_bad_input_is_named():
    frame = pl.DataFrame({"video_id": ["a"], "verdict": [1]})
    with pytest.raises(KeyError, match="captioner"):
        count_table(frame, ["captioner"], 2)
    with pytest.raises(TypeError, match="verdict"):
        count_table(frame.with_columns(pl.col("verdict").cast(pl.Float64)), [], 2)
    table = count_table(frame.with_columns(model=pl.lit("x")), ["model"], 2)
    with pytest.raises(ValueError, match="'bad'.*shape"):
        metrics_frame(table, {"bad": lambda c: c.sum()}, n_resamples=10)
    with pytest.raises(ValueError, match="average_over"):
        metrics_frame(table, {"n": lambda c: c[..., 0]}, average_over="task")


@pytest.mark.parametrize("seed", range(12))
def test_count_table_groups_are_the_sorted_distinct_keys_nulls_last(seed):
    """Group and cluster ids index the distinct keys sorted column by column, a null after every value, for string
    and integer columns with and without nulls (count_table factorizes them one column at a time)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))

    def column(kind):
        k = int(rng.integers(1, 7))
        null = rng.random(n) < (0.2 if kind in ("str_null", "int_null") else 0.0)
        if kind.startswith("str"):
            words = ["b", "a", "B", "é", "", "a b", "zz"][:k]
            return pl.Series([None if z else words[i] for i, z in zip(rng.integers(0, k, n), null)], dtype=pl.String)
        return pl.Series([None if z else int(i) for i, z in zip(rng.integers(-3, k, n), null)], dtype=pl.Int64)

    kinds = rng.choice(["str", "str_null", "int", "int_null"], int(rng.integers(1, 4)))
    frame = pl.DataFrame({f"g{i}": column(kind) for i, kind in enumerate(kinds)}).with_columns(
        video_id=pl.Series([f"v{i}" if i else None for i in rng.integers(0, 9, n)], dtype=pl.String),
        verdict=pl.Series(rng.integers(-1, 3, n), dtype=pl.Int8))
    groups = [f"g{i}" for i in range(len(kinds))]
    table = count_table(frame, groups, n_codes=3)

    def order(key):  # None after every value, column by column
        return tuple((v is None, v if v is not None else 0) for v in key)

    keys = sorted(set(frame.select(groups).iter_rows()), key=order)
    videos = sorted(set(frame["video_id"]), key=lambda v: (v is None, v or ""))
    assert table.groups.rows() == [tuple(None if v is None else str(v) for v in key) for key in keys]
    assert table.clusters["video_id"].to_list() == videos
    expected = np.zeros((len(videos), len(keys), 4), dtype=np.int64)
    for row in frame.iter_rows(named=True):
        code = row["verdict"] if row["verdict"] >= 0 else 3
        expected[videos.index(row["video_id"]), keys.index(tuple(row[g] for g in groups)), code] += 1
    np.testing.assert_array_equal(table.counts, expected)
