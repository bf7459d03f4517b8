"""The OpenAI-compatible judge with capeval's defaults against a stock vLLM server (issue 25, item 1): SmolLM2 (the
project's CPU model, adapters/smollm2.py) served by `python -m vllm.entrypoints.openai.api_server` with nothing but
the model, host and port, and `capeval judge --judge openai --base-url … --judge-model …` with no other option. On
today's main every CapQuiz strict request came back cut at max_tokens=8 ('{\\n  "answer"') and failed after six
identical attempts; here at least 95% of the items of CapQuiz strict, VidCapBench strict and CAPability strict get a verdict (CAPability:
the copied object_number/object_color fields' patterns are bounded, so SmolLM2 cannot fill them until max_tokens).
VDC strict and DREAM-1K strict (issue 28) likewise, on real VDC questions and DREAM-1K clips. Official modes with this
135M model fall short (docs/judges.md, "Use a local judge") and are not asserted: their verdict share is measured
and recorded (the test's `verdict_share` property; `-s` prints it).
(docs/first-hour.md's test runs the same server from the page's own commands.)"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import polars as pl
import pytest

from capeval.engine.cli import main

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

_CACHE = Path(os.environ.get("CAPEVAL_MODEL_CACHE", Path(__file__).resolve().parents[2] / ".capeval" / "models"))
START_TIMEOUT_S = float(os.environ.get("CAPEVAL_VLLM_SERVER_TIMEOUT", "900"))


@pytest.fixture(scope="module")
def stock_server(tmp_path_factory):
    smollm2 = pytest.importorskip("capeval.adapters.smollm2")
    try:
        smollm2.find_gguf()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    model = smollm2.build_smollm2(_CACHE / "smollm2-135m-instruct")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log_path = tmp_path_factory.mktemp("stock-vllm") / "server.log"
    env = dict(os.environ)
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # the suite's in-process engine setting, not the server's
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
                                 "--host", "127.0.0.1", "--port", str(port)],
                                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"server exited {proc.returncode}: {log_path.read_text(errors='replace')[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"server not healthy after {START_TIMEOUT_S:.0f} s")
            time.sleep(2)
        yield f"http://127.0.0.1:{port}/v1", str(model)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)


def _capquiz(folder: Path) -> list[str]:
    colours, animals = ["red", "blue", "green", "yellow", "black", "white"], ["dog", "cat", "horse", "bird"]
    items, captions = [], []
    for i in range(10):
        c, a = colours[i % 6], animals[i % 4]
        captions.append({"video_id": f"clip{i}", "caption": f"A {c} {a} runs across a field and stops by a tree.",
                         "captioner": "mine"})
        items += [{"item_id": f"clip{i}/colour", "video_id": f"clip{i}", "task": "colour",
                   "annotation": f"What colour is the {a}?", "options": [c, colours[(i + 1) % 6], colours[(i + 2) % 6]],
                   "answer": c},
                  {"item_id": f"clip{i}/animal", "video_id": f"clip{i}", "task": "animal",
                   "annotation": "Which animal runs across the field?",
                   "options": [animals[(i + 1) % 4], a, animals[(i + 2) % 4]], "answer": a}]
    (folder / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in items))
    (folder / "captions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in captions))
    return ["--items", str(folder / "items.jsonl"), "--captions", str(folder / "captions.jsonl")]


def _vidcapbench(folder: Path, shared_data: Path) -> list[str]:
    """The QA and captions of the held-out oracle cases (../shared/protocols), in the benchmark's release layout."""
    oracle = shared_data.parent / "protocols" / "vidcapbench_oracle.jsonl"
    if not oracle.is_file():
        pytest.skip("no VidCapBench oracle file")
    qa, captions = {}, {}
    for line in oracle.read_text(encoding="utf-8").splitlines():
        case = json.loads(line)
        for q in case["qa"]:
            video = f"{case['case_id']}_{q['video_dir']}"
            qa.setdefault(video, {})[q["question_id"]] = {k: q[k] for k in ("question_id", "question", "answer",
                                                                            "sub_category")}
        for c in case["captions"]:
            captions[f"{case['case_id']}_{c['video_dir']}"] = c["caption"]
    videos = [v for v in qa if v in captions][:8]
    (folder / "qa.jsonl").write_text("".join(json.dumps({"video_dir": v, "QA_pairs": list(qa[v].values())}) + "\n"
                                             for v in videos))
    (folder / "captions.jsonl").write_text("".join(json.dumps({"video_id": v, "caption": captions[v]}) + "\n"
                                                   for v in videos))
    return ["--dataset", "vidcapbench", "--items", str(folder / "qa.jsonl"), "--captions",
            str(folder / "captions.jsonl")]


def _capability(folder: Path, shared_data: Path) -> list[str]:
    """The first three items of every CAPability task (42 requests), with the released qwen2.5vl_7b captions."""
    root = shared_data / "capability"
    annotations = folder / "annotations"
    annotations.mkdir()
    for task in sorted((root / "annotations").glob("*.jsonl")):
        (annotations / task.name).write_text("\n".join(task.read_text().splitlines()[:3]) + "\n")
    return ["--dataset", "capability", "--items", str(annotations), "--captions",
            str(root / "captions" / "qwen2.5vl_7b")]


@pytest.mark.parametrize("protocol", ["capquiz", "vidcapbench", "capability"])
def test_default_judge_gives_verdicts_on_stock_vllm(stock_server, protocol, tmp_path, shared_data):
    base_url, model = stock_server
    inputs = {"capquiz": lambda: _capquiz(tmp_path), "vidcapbench": lambda: _vidcapbench(tmp_path, shared_data),
              "capability": lambda: _capability(tmp_path, shared_data)}[protocol]()
    out = tmp_path / "verdicts.parquet"
    main(["judge", "--protocol", protocol, *inputs, "--judge", "openai", "--base-url", base_url, "--judge-model",
          model, "--cache", str(tmp_path / "cache"), "--out", str(out), "--no-progress"])
    verdicts = pl.read_parquet(out)
    final = verdicts.filter(pl.col("step") == verdicts["step"][-1])  # VidCapBench: the score step's rows
    judged = final.filter(pl.col("verdict") >= 0).height
    assert judged >= 0.95 * final.height, (judged, final.height, final["error"].drop_nulls().to_list()[:3])


PACKS = Path(__file__).resolve().parents[2].parent / "shared" / "protocols"


def _vdc(folder: Path, shared_data: Path) -> list[str]:
    """The first video of two VDC kinds (the same video in every kind's file) with its first five real questions
    each, captioned once with its reference answers of both kinds (what a caption that covers the video would
    say; a caption whose prompt names no kind is judged on every kind)."""
    release = folder / "vdc"
    release.mkdir()
    captions: dict[str, list[str]] = {}
    for kind in ("detailed", "camera"):
        line = (shared_data / "vdc" / f"{kind}.jsonl").read_text(encoding="utf-8").splitlines()[0]
        ((video, qa),) = json.loads(line).items()
        (release / f"{kind}.jsonl").write_text(json.dumps({video: qa[:5]}) + "\n")
        captions.setdefault(video, []).extend(f"{q['answer'].rstrip('.')}." for q in qa)
    (folder / "captions.jsonl").write_text("".join(json.dumps({"video_id": v, "caption": " ".join(sentences)}) + "\n"
                                                   for v, sentences in captions.items()))
    return ["--dataset", "vdc", "--items", str(release), "--captions", str(folder / "captions.jsonl")]


def _dream1k(folder: Path, shared_data: Path) -> list[str]:
    """The first three DREAM-1K clips (the release file read in place), each captioned with its own reference
    description."""
    from capeval.engine.protocols.lvcap import dream1k  # the `dream1k` dataset kind's release reader

    release = shared_data / "dream1k" / "DREAM-1k.jsonl"
    clips = dream1k.load_clips(release).slice(0, 3)
    captions = [{"video_id": v, "caption": ref} for v, ref in zip(clips["video_id"].to_pylist(),
                                                                  clips["answer"].to_pylist())]
    (folder / "captions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in captions))
    return ["--dataset", "dream1k", "--items", str(release), "--limit", "3", "--captions",
            str(folder / "captions.jsonl")]


_ISSUE28 = {"vdc": (_vdc, "vdc.toml"), "dream1k": (_dream1k, "autodq.toml")}


@pytest.mark.parametrize(("protocol", "mode"), [("vdc", "strict"), ("vdc", "official"), ("dream1k", "strict")])
def test_vdc_and_dream1k_give_verdicts_on_stock_vllm(stock_server, protocol, mode, tmp_path, shared_data,
                                                     record_property):
    """Strict (the default mode) with the default options: at least 95% of the stored rows get a verdict. Official
    (the pack's prompts, its sampling and parsing): measured and recorded, not asserted (VDC: 0 of 10 on 2026-11-27,
    the replies are not Python dict literals). DREAM-1K official is not run here: the AutoDQ prompts send no
    max_tokens, SmolLM2 writes to the end of its context, and 3 clips took 23 minutes on 2 shared cores for 0 of 6
    rows with a verdict (replies not JSON with an 'events' list)."""
    base_url, model = stock_server
    build, pack = _ISSUE28[protocol]
    inputs = build(tmp_path, shared_data)
    if mode == "official":
        if not (PACKS / pack).is_file():
            pytest.skip(f"no official pack {pack} beside the project")
        inputs += ["--mode", "official", "--prompts", str(PACKS / pack)]
    out = tmp_path / "verdicts.parquet"
    code = main(["judge", "--protocol", protocol, *inputs, "--judge", "openai", "--base-url", base_url,
                 "--judge-model", model, "--cache", str(tmp_path / "cache"), "--out", str(out), "--no-progress"])
    verdicts = pl.read_parquet(out)
    judged = verdicts.filter(pl.col("verdict") >= 0).height
    share = judged / verdicts.height if verdicts.height else 0.0
    record_property("verdict_share", f"{protocol} {mode}: {judged} of {verdicts.height} ({share:.0%}), exit {code}")
    print(f"\n{protocol} {mode}: {judged} of {verdicts.height} rows with a verdict ({share:.0%}), exit {code}; "
          f"errors: {verdicts['error'].drop_nulls().to_list()[:3]}")
    assert verdicts.height > 0
    if mode == "strict":
        assert judged >= 0.95 * verdicts.height, (judged, verdicts.height, verdicts["error"].drop_nulls().to_list()[:3])
