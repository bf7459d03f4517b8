"""Conformance against the official code's outcomes.

Oracle files are DISCOVERED, not named: every file under the oracle folder(s) whose name matches a kind's pattern
(`ORACLE_KINDS`, searched recursively) holds cases of that kind, so acceptance can add further cases of the same
kinds -- another file beside the shipped one, or another folder -- and every conformance test runs on them
unchanged. The folders are $CAPEVAL_ORACLE_DIR (several joined with os.pathsep), default ../shared/protocols beside
the project. An expected kind with no file, or only empty files, FAILS (test_oracle_discovery.py and `read_oracle`),
never a silent skip. Case ids that repeat across files are prefixed with their file's stem, so each case keeps its
own replies and items."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ORACLE_DIRS = tuple(Path(p) for p in os.environ.get("CAPEVAL_ORACLE_DIR", str(ROOT.parent / "shared" / "protocols"))
                    .split(os.pathsep) if p)
ORACLE_DIR = ORACLE_DIRS[0]
#: The official prompt packs (never copied into the project): the same folder holds them.
PACK_DIR = Path(os.environ.get("CAPEVAL_PACK_DIR", ROOT.parent / "shared" / "protocols"))

#: Oracle kind (its shipped file's name, which the tests pass) -> the file-name pattern of its cases.
ORACLE_KINDS = {
    "vidcapbench_oracle.jsonl": "vidcapbench*oracle*.jsonl",
    "capability_parse_oracle.jsonl": "capability*parse*oracle*.jsonl",
    "capability_metric_oracle.jsonl": "capability*metric*oracle*.jsonl",
    "autodq_oracle.jsonl": "autodq*oracle*.jsonl",
    "vdc_oracle.jsonl": "vdc*oracle*.jsonl",
}


def oracle_files(kind: str) -> list[Path]:
    """Every file of this kind under the oracle folders, in a stable order."""
    pattern = ORACLE_KINDS.get(kind, kind)
    found = {p.resolve() for d in ORACLE_DIRS if d.is_dir() for p in d.rglob(pattern) if p.is_file()}
    return sorted(found)


def _read(path: Path) -> list[dict]:
    cases = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            cases.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{n}: not a JSON line ({exc})") from None
    return cases


def oracle_cases(kind: str) -> list[dict]:
    """All cases of a kind from every file found (for parametrize at collection time; none found gives no cases,
    and test_oracle_discovery.py fails for it)."""
    out, seen = [], set()
    for path in oracle_files(kind):
        for case in _read(path):
            cid = case.get("case_id")
            if cid is not None:
                if cid in seen:
                    case = {**case, "case_id": f"{path.stem}/{cid}"}
                seen.add(case["case_id"])
            out.append(case)
    return out


def read_oracle(kind: str) -> list[dict]:
    """The cases of a kind, failing (not skipping) when there are none."""
    cases = oracle_cases(kind)
    if not cases:
        pytest.fail(f"no oracle cases of kind {kind!r}: no non-empty file matching {ORACLE_KINDS.get(kind, kind)!r} "
                    f"under {[str(d) for d in ORACLE_DIRS]} (set CAPEVAL_ORACLE_DIR)")
    return cases


@pytest.fixture(scope="session")
def pack_dir() -> Path:
    return PACK_DIR
