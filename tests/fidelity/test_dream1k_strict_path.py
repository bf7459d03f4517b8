"""`dream1k` in strict mode through the production path (build_requests -> a judge -> run_judging -> compute_metrics
as a sweep calls it) on a few real DREAM-1K clips: every row gets a verdict or a stated failure (a caption that
failed upstream, a judge that failed on one clip), and the metrics report precision, recall and F1 with those
failures counted, never a silent zero; and the texts sent and the overall numbers are those of lvcap's strict event
flow, which it delegates to."""

from __future__ import annotations

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from capeval.adapters.base import JudgeResponse
from capeval.engine.registry import lookup
from capeval.engine.schemas import ParseStatus


def _load(name: str):
    """A module of this folder by path (tests/ is not a package, so no relative import)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(f"_dream1k_strict_{name}", Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


H = _load("_dream1k_replay")
pytestmark = [pytest.mark.skipif(not H.DREAM.is_file(), reason="DREAM-1K not present"), pytest.mark.slow]
STRICT = {"mode": "strict"}


class FailsOn:
    """Answers through `inner`, except every request of the clips in `broken`: no content, a backend error."""

    def __init__(self, inner, broken: set[str]):
        self.inner, self.broken, self.name, self.revision = inner, broken, inner.name, inner.revision

    def judge(self, requests):
        asked = [r for r in requests if (r.meta or {}).get("item_id") not in self.broken]
        answers = iter(self.inner.judge(asked))
        return [next(answers) if (r.meta or {}).get("item_id") not in self.broken
                else JudgeResponse(r.key, None, error="backend: connection reset") for r in requests]

    def close(self) -> None:
        pass


def test_strict_rows_have_a_verdict_or_a_stated_failure(tmp_path):
    from capeval.adapters.local_judge import LocalJudge

    items, captions, _, _ = H.scripted_clips(200)
    vids = ["1", "151", "201", "401", "649", "801"]  # 151: its caption failed upstream (scripted_clips), 649: no events
    items = items.filter(pc.is_in(items["item_id"], pa.array(vids)))
    captions = captions.filter(pc.is_in(captions["video_id"], pa.array(vids)))
    protocol = lookup("protocol", "dream1k")
    judge = FailsOn(LocalJudge(), {"401"})
    _, verdicts, sent = H.run(protocol, STRICT, items, captions, judge, tmp_path / "cache")

    assert set(verdicts["item_id"]) == set(vids)
    assert {"extract"} < set(verdicts["step"])
    for rec in verdicts.iter_rows(named=True):
        intermediate = rec["step"] in protocol.intermediate_steps
        if rec["verdict"] >= 0 or (intermediate and rec["parse_status"] <= ParseStatus.REPAIRED):
            continue
        assert rec["parse_status"] > ParseStatus.REPAIRED and rec["error"], rec
    # the failures say what failed
    broken = verdicts.filter(pl.col("item_id") == "401")
    assert broken.height and all("connection reset" in (e or "") for e in broken["error"]), broken["error"].to_list()
    uncaptioned = verdicts.filter(pl.col("item_id") == "151")
    assert uncaptioned.height and all("captioner timed out" in (e or "") for e in uncaptioned["error"])
    assert not any(s["item_id"] == "151" for s in sent)  # nothing is asked about a caption that does not exist
    # strict mode fences the caption as data and constrains the reply
    assert all(s["system"] for s in sent)
    judged = verdicts.filter(~pl.col("item_id").is_in(["151", "401"]) & (pl.col("verdict") >= 0))
    assert set(judged["item_id"]) == set(vids) - {"151", "401"}

    table = H.metrics(protocol, verdicts, items, captions, STRICT)
    head = table.filter(pl.col("bucket") == "all")
    for metric in ("precision", "recall", "F1"):
        row = head.filter(pl.col("metric") == metric)
        assert row.height == 1, (metric, head.select("metric").to_series().to_list())
        r = row.row(0, named=True)
        assert r["value"] is not None and 0.0 <= r["value"] <= 100.0, r
        assert r["n_no_verdict"] >= 2, r  # the failed caption's and the failed judge's rows are counted

    # strict mode is lvcap's strict event flow: the same texts sent, the same overall numbers
    lvcap = lookup("protocol", "lvcap")
    _, lv_verdicts, lv_sent = H.run(lvcap, STRICT, items, captions, judge, tmp_path / "lvcap")
    assert H.sent_texts(lv_sent) == H.sent_texts(sent)
    lv_head = H.metrics(lvcap, lv_verdicts, items, captions, STRICT).filter(pl.col("bucket") == "all")
    for lv_name, name in (("S_e", "F1"), ("event_precision", "precision"), ("event_recall", "recall")):
        a = lv_head.filter(pl.col("metric") == lv_name).row(0, named=True)
        b = head.filter(pl.col("metric") == name).row(0, named=True)
        assert (a["value"], a["n"], a["n_no_verdict"]) == (b["value"], b["n"], b["n_no_verdict"]), name
