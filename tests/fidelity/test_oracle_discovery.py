"""Oracle files are found by pattern, and an expected kind that is absent FAILS the run (it used to be skipped
silently when its fixed file name was missing)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def _conftest():
    spec = importlib.util.spec_from_file_location("_fidelity_conftest_discovery", HERE / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CONF = _conftest()


@pytest.mark.parametrize("kind", sorted(CONF.ORACLE_KINDS))
def test_every_expected_oracle_kind_is_present(kind):
    files = CONF.oracle_files(kind)
    assert files, (f"no oracle file of kind {kind!r} (pattern {CONF.ORACLE_KINDS[kind]!r}) under "
                   f"{[str(d) for d in CONF.ORACLE_DIRS]}")
    assert CONF.oracle_cases(kind), f"the {kind!r} files {files} hold no case"


def _discover_in(folder: Path, kind: str) -> dict:
    """oracle_files / oracle_cases / read_oracle run in a fresh process with CAPEVAL_ORACLE_DIR=folder."""
    code = (f"import importlib.util, json, sys\n"
            f"spec = importlib.util.spec_from_file_location('c', {str(HERE / 'conftest.py')!r})\n"
            f"m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
            f"out = {{'files': [p.name for p in m.oracle_files({kind!r})],\n"
            f"       'ids': [c.get('case_id') for c in m.oracle_cases({kind!r})]}}\n"
            f"try:\n    m.read_oracle({kind!r}); out['read'] = 'ok'\n"
            f"except BaseException as exc:\n    out['read'] = type(exc).__name__ + ': ' + str(exc)\n"
            f"print(json.dumps(out))\n")
    env = {**os.environ, "CAPEVAL_ORACLE_DIR": str(folder)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_further_files_of_a_kind_are_found_and_case_ids_kept_apart(tmp_path):
    (tmp_path / "more").mkdir()
    (tmp_path / "vidcapbench_oracle.jsonl").write_text(json.dumps({"case_id": "vcb-1"}) + "\n")
    (tmp_path / "more" / "vidcapbench_oracle_acceptance.jsonl").write_text(
        json.dumps({"case_id": "vcb-1"}) + "\n\n" + json.dumps({"case_id": "vcb-5"}) + "\n")
    (tmp_path / "capability_parse_oracle.jsonl").write_text(json.dumps({"case_id": "other kind"}) + "\n")
    got = _discover_in(tmp_path, "vidcapbench_oracle.jsonl")
    assert sorted(got["files"]) == ["vidcapbench_oracle.jsonl", "vidcapbench_oracle_acceptance.jsonl"]
    assert sorted(got["ids"]) == ["vcb-1", "vcb-5", "vidcapbench_oracle/vcb-1"] or \
        sorted(got["ids"]) == ["vcb-1", "vcb-5", "vidcapbench_oracle_acceptance/vcb-1"]
    assert got["read"] == "ok"


def test_an_absent_kind_fails_instead_of_skipping(tmp_path):
    (tmp_path / "autodq_oracle.jsonl").write_text(json.dumps({"case_id": "x"}) + "\n")
    got = _discover_in(tmp_path, "vidcapbench_oracle.jsonl")
    assert got["files"] == [] and got["ids"] == []
    assert got["read"].startswith("Failed:") and "vidcapbench" in got["read"], got["read"]  # pytest.fail, not skip
    (tmp_path / "vidcapbench_oracle.jsonl").write_text("\n")  # a file with no case fails as well
    assert _discover_in(tmp_path, "vidcapbench_oracle.jsonl")["read"].startswith("Failed:")


def test_the_kind_test_fails_in_a_folder_without_the_kind(tmp_path):
    """Run the real discovery test against a folder that lacks the VidCapBench oracle: it fails (exit 1), and no
    test of the kind is reported as skipped for a missing file."""
    env = {**os.environ, "CAPEVAL_ORACLE_DIR": str(tmp_path)}
    (tmp_path / "autodq_oracle.jsonl").write_text(json.dumps({"case_id": "x"}) + "\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(Path(__file__)),
                           "-k", "every_expected_oracle_kind and vidcapbench"], env=env, capture_output=True,
                          text=True, timeout=300, cwd=HERE.parents[1])
    assert done.returncode == 1, done.stdout[-2000:]
    assert "1 failed" in done.stdout and "skipped" not in done.stdout, done.stdout[-2000:]
