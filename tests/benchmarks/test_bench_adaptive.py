"""`capeval bench adaptive --json --quick` through the installed script: on the simulated sweep (21 systems, 2,000
videos, known effects, 20 repetitions) the adaptive decisions agree with the full run at >= 1 - alpha, the
sequences cover the full run's differences at every round at >= 1 - alpha, and >= 40% of the requests are saved."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CAPEVAL = Path(sys.executable).with_name("capeval")


def test_bench_adaptive_quick_meets_its_targets():
    done = subprocess.run([str(CAPEVAL), "bench", "adaptive", "--json", "--quick"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["systems"] >= 20 and result["videos"] >= 2000 and result["repeats"] >= 20
    alpha = result["alpha"]
    assert result["agreement"] >= 1 - alpha
    assert result["coverage"] >= 1 - alpha
    assert result["requests_saved_share"] >= 0.40
    assert all(result["targets_met"].values())
    # the saving comes from stopping early, and later for closer pairs
    stops = result["mean_stop_share_by_true_gap"]
    assert result["early_share"] > 0.5 and stops["4-inf delta"] < stops["0-0.5 delta"]
    # the additive `targets` list: the same verdicts with their values
    listed = {row["name"]: row for row in result["targets"]}
    assert listed["agreement"]["value"] == result["agreement"] and listed["agreement"]["met"] is True
    assert listed["agreement"]["target"] == f">= {1 - alpha:.4g} (1 - alpha)"
    assert [row["met"] for row in result["targets"]] == [True, True, True]


def test_bench_adaptive_quick_prints_its_targets_table():
    done = subprocess.run([str(CAPEVAL), "bench", "adaptive", "--quick"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert done.stdout.isascii() and max(map(len, lines)) <= 100
    verdicts = {line.split()[0]: line.split()[-1] for line in lines
                if line.split() and line.split()[0] in ("agreement", "coverage", "requests_saved_share")}
    assert verdicts == {"agreement": "met", "coverage": "met", "requests_saved_share": "met"}
    assert lines[-1] == "3 of 3 met"
