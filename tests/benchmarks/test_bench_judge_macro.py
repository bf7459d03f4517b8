"""`capeval bench judge --json --quick` (the macro benchmark): the HTTP section against the loopback server, the
targets block, and sections that cannot run reported instead of crashing the benchmark."""

from __future__ import annotations

import json

from benchmarks.bench_judge import targets
from engine.cli import main as capeval


def test_http_section_json(capsys):
    rc = capeval(["bench", "judge", "--json", "--quick", "--only", "http"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    result = json.loads(out.out)  # stdout carries the JSON alone
    http = result["http"]
    assert http["errors"] == 0 and http["n_requests"] == 3000 and http["in_flight"] == 256
    assert 0 < http["client_cpu_ms_per_request"] < 5
    assert http["baseline_openai_sdk"]["errors"] == 0
    # the SDK baseline costs more client CPU per request than the lean path, on the same requests
    assert http["cpu_vs_sdk"] < 1
    met = result["targets_met"]
    assert met["http_client_cpu_ms_per_request<=0.35"] == (http["client_cpu_ms_per_request"] <= 0.35)
    assert met["vllm_grouped_speedup>=2"] is None and met["streaming_share>=0.9"] is None  # not run


def test_targets_from_numbers():
    result = {"streaming": {"share": 0.93}, "overhead": {"engine_cpu_ms_per_request": 0.25},
              "http": {"client_cpu_ms_per_request": 0.12},
              "vllm": {"speedup": 2.4, "grouped_prefix_cache": {"cached_share": 0.71}}}
    assert targets(result) == {"streaming_share>=0.9": True, "engine_cpu_ms_per_request<=0.2": False,
                               "http_client_cpu_ms_per_request<=0.35": True, "vllm_grouped_speedup>=2": True,
                               "vllm_cached_share>=0.75": False}
    assert targets({"vllm": {"note": "failed: no vLLM"}})["vllm_grouped_speedup>=2"] is None
