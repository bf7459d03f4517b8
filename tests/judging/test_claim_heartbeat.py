"""Claims of a live process never time out: a heartbeat thread keeps them fresh past `claim_timeout_s`, so a second
process (a real one, seen as on another host where pids cannot be checked) waits instead of sending the same requests
again. Once the owner stops heart-beating (SIGKILL, or its cache closed without release) the claims go stale and are
taken over one timeout later. The heartbeat thread starts with the first claim, stops with close/release_all, and
survives a locked database."""

from __future__ import annotations

import gc
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from capeval.engine.store.judgment_cache import CachedResponse, JudgmentCache

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 0.6  # claim_timeout_s: the heartbeat beats every 0.2 s
KEYS = [f"key-{i}" for i in range(20)]

# Process A: claims KEYS, says so, keeps working (sleeping) for `work_s`, then either closes its cache without
# releasing (the heartbeat stops, the process lives on) or just goes on sleeping until it is killed.
_OWNER = textwrap.dedent("""
    import sys, threading, time
    sys.path[:0] = [{repo!r}]
    from capeval.engine.store.judgment_cache import JudgmentCache
    cache = JudgmentCache({cache!r}, claim_timeout_s={timeout!r})
    res = cache.claim({keys!r})
    assert sorted(res.claimed) == sorted({keys!r}), res
    print("claimed", flush=True)
    time.sleep({work_s!r})
    if {close!r}:
        cache.close()
        alive = [t.name for t in threading.enumerate() if t.name == "capeval-claim-heartbeat"]
        print("closed", len(alive), flush=True)
    time.sleep(120)
""")


def _start_owner(tmp_path, *, work_s: float, close: bool) -> subprocess.Popen:
    code = _OWNER.format(repo=str(REPO), cache=str(tmp_path), timeout=TIMEOUT_S, keys=KEYS, work_s=work_s,
                         close=close)
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "claimed"
    return proc


def _assert_held_for(observer: JudgmentCache, seconds: float, owner_pid: int) -> None:
    """Every look for `seconds` finds all KEYS held by the owner (none claimable)."""
    end = time.monotonic() + seconds
    looks = 0
    while time.monotonic() < end:
        res = observer.claim(KEYS)
        assert res.claimed == [] and not res.found, f"claims lost after {looks} looks"
        assert set(res.held) == set(KEYS) and {h[0] for h in res.held.values()} == {owner_pid}
        looks += 1
        time.sleep(0.05)
    assert looks > 10


def _seconds_until_taken_over(observer: JudgmentCache, limit_s: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < limit_s:
        res = observer.claim(KEYS)
        if res.claimed:
            assert sorted(res.claimed) == sorted(KEYS) and not res.held  # all at once: one heartbeat for them all
            return time.monotonic() - start
        time.sleep(0.02)
    pytest.fail(f"claims not taken over within {limit_s} s")


def _heartbeat_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "capeval-claim-heartbeat" and t.is_alive()]


@pytest.mark.timeout(60)
def test_claims_of_a_working_process_outlive_the_timeout_and_go_stale_when_it_is_killed(tmp_path):
    owner = _start_owner(tmp_path, work_s=120, close=False)
    try:
        with JudgmentCache(tmp_path, claim_timeout_s=TIMEOUT_S) as observer:
            observer.host = "another-host"  # as a run on another machine: the owner's pid cannot be checked
            _assert_held_for(observer, 4 * TIMEOUT_S, owner.pid)  # well past the timeout: still the owner's
            owner.send_signal(signal.SIGKILL)
            owner.wait(timeout=10)
            took = _seconds_until_taken_over(observer, 10 * TIMEOUT_S)
            # The last beat was at most TIMEOUT_S / 3 before the kill, so the claims went stale TIMEOUT_S after it.
            assert TIMEOUT_S / 3 <= took <= TIMEOUT_S + 1.5, took
            rows = observer._db.execute("SELECT DISTINCT pid, host FROM claims").fetchall()
            assert rows == [(observer.pid, "another-host")]
    finally:
        owner.kill()
        owner.wait()


@pytest.mark.timeout(60)
def test_claims_of_a_cache_closed_without_release_go_stale_while_its_process_lives(tmp_path):
    owner = _start_owner(tmp_path, work_s=4 * TIMEOUT_S, close=True)
    try:
        with JudgmentCache(tmp_path, claim_timeout_s=TIMEOUT_S) as observer:  # same host: the owner's pid is alive
            _assert_held_for(observer, 3 * TIMEOUT_S, owner.pid)
            assert owner.stdout.readline().split() == ["closed", "0"]  # close() stopped the heartbeat thread
            assert owner.poll() is None  # alive, so only the timeout frees its keys
            took = _seconds_until_taken_over(observer, 10 * TIMEOUT_S)
            assert took <= TIMEOUT_S + 1.5, took
            assert owner.poll() is None
    finally:
        owner.kill()
        owner.wait()


def _claim_time(cache: JudgmentCache, key: str) -> float:
    return cache._db.execute("SELECT created FROM claims WHERE request_key = ?", (key,)).fetchone()[0]


def test_heartbeat_starts_with_the_first_claim_and_stops_with_release_all_and_close(tmp_path):
    before = len(_heartbeat_threads())
    cache = JudgmentCache(tmp_path, claim_timeout_s=0.3)
    cache.put_many([CachedResponse("answered", "judge", "text")])
    assert cache.claim([]).claimed == [] and list(cache.claim(["answered"]).found) == ["answered"]
    assert len(_heartbeat_threads()) == before  # nothing claimed: no thread
    cache.claim(["k1"])
    assert len(_heartbeat_threads()) == before + 1
    first = _claim_time(cache, "k1")
    time.sleep(0.35)
    assert _claim_time(cache, "k1") > first  # refreshed by the heartbeat, not by another claim
    cache.claim(["k2"])
    assert len(_heartbeat_threads()) == before + 1  # one thread per cache, however many claims
    cache.release_all()
    assert len(_heartbeat_threads()) == before
    cache.claim(["k3"])
    assert len(_heartbeat_threads()) == before + 1  # a later claim starts it again
    cache.close()
    assert len(_heartbeat_threads()) == before

    dropped = JudgmentCache(tmp_path / "dropped", claim_timeout_s=0.3)
    dropped.claim(["k"])
    thread = _heartbeat_threads()[-1]
    del dropped  # never closed: the heartbeat must not run on for the rest of the process
    gc.collect()
    thread.join(timeout=5)
    assert not thread.is_alive()


def test_heartbeat_survives_a_locked_database_and_beats_again_after(tmp_path):
    errors = []
    old_hook, threading.excepthook = threading.excepthook, errors.append
    try:
        with JudgmentCache(tmp_path, claim_timeout_s=0.3) as cache:
            cache.claim(["k"])
            [thread] = [t for t in _heartbeat_threads() if t is cache._heartbeat.thread]
            blocker = sqlite3.connect(cache.path, isolation_level=None)
            blocker.execute("BEGIN IMMEDIATE")  # another writer holds the lock for several beats
            time.sleep(0.6)
            locked_time = _claim_time(cache, "k")
            blocker.execute("COMMIT")
            blocker.close()
            assert thread.is_alive()
            deadline = time.monotonic() + 3
            while _claim_time(cache, "k") == locked_time and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _claim_time(cache, "k") > locked_time  # beating again
            assert cache.claim(["k2"]).claimed == ["k2"]  # the caller never saw the failed beats
        assert not thread.is_alive()
    finally:
        threading.excepthook = old_hook
    assert errors == []
