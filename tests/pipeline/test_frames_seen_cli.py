"""`capeval show --frames` and `capeval compare --frames` on a real sweep: two captioners over the same generated
videos at `uniform:8` and `linspace:8` (the local captioner, real Ray, real decoding). Same spec: identical frames;
different specs: the differing frame indices, exactly those of each rule; labels escaped for the terminal."""

from __future__ import annotations

import json

import av
import numpy as np
import pytest
from _sweeps import write_sweep
from _terminal_escapes import HOSTILE, assert_escaped

from capeval.engine.cli import main as cli_main
from capeval.engine.frames import FrameSpec

N_VIDEOS = 2


@pytest.fixture(scope="module")
def swept(tmp_path_factory, ray_local):
    root = tmp_path_factory.mktemp("frames-seen")
    captioners = ({"name": "local", "label": "a"}, {"name": "local", "label": "b" + HOSTILE, "params": {"latency_s": 0.0}})
    sweep = write_sweep(root, "ledger", prompts=("brief",), frames=("uniform:8", "linspace:8"), n_videos=N_VIDEOS,
                        duration_s=1.5, captioners=captioners, protocols=(), judges=(),
                        options={"n_resamples": None})
    out = root / "out"
    assert cli_main(["sweep", str(sweep), "--out", str(out), "--no-progress"]) == 0
    return out


def _run(capsys, *argv):
    code = cli_main(list(argv))
    printed = capsys.readouterr()
    return code, printed


def _frame_count(video) -> int:
    with av.open(str(video)) as c:
        return sum(1 for _ in c.decode(c.streams.video[0]))


def test_same_spec_two_captioners_saw_identical_frames(swept, capsys):
    code, printed = _run(capsys, "compare", str(swept), "--frames", "captioner=a,frame_spec=uniform:8",
                         "frame_spec=uniform:8,prompt_id=brief,captioner=b" + HOSTILE, "--json")
    assert code == 0, printed.err
    result = json.loads(printed.out)
    assert result["identical"] and result["counts"] == {"identical": N_VIDEOS, "differ": 0, "unknown": 0}
    code, printed = _run(capsys, "compare", str(swept), "--frames", "captioner=a,frame_spec=uniform:8",
                         "frame_spec=uniform:8,prompt_id=brief,captioner=b" + HOSTILE)
    assert code == 0 and printed.out.count(": identical (8 frames") == N_VIDEOS
    assert_escaped(printed, "compare --frames")


def test_different_specs_report_the_differing_indices_of_each_rule(swept, capsys):
    code, printed = _run(capsys, "compare", str(swept), "--frames", "uniform:8", "linspace:8", "--json")
    assert code == 0, printed.err
    result = json.loads(printed.out)
    assert not result["identical"] and result["counts"]["differ"] == N_VIDEOS
    videos = sorted((swept / "videos").rglob("*.mp4"))
    assert len(videos) == N_VIDEOS
    for v, video in zip(result["videos"], videos):
        n = _frame_count(video)
        rate = n / 1.5
        want_linspace = FrameSpec.parse("linspace:8").indices(n).tolist()
        want_uniform = [int(round(t * rate)) for t in FrameSpec.parse("uniform:8").timestamps(1.5, rate)]
        assert v["status"] == "differ" and v["by"] == "indices"
        assert v["b"]["indices"] == want_linspace and v["a"]["indices"] == want_uniform
        assert v["only_a"] == sorted(set(want_uniform) - set(want_linspace))
        assert v["only_b"] == sorted(set(want_linspace) - set(want_uniform))
        # frames at the same index are the same pixels: only the positions whose index differs are listed
        assert v["positions"] == [i for i, (x, y) in enumerate(zip(want_uniform, want_linspace)) if x != y]
    code, printed = _run(capsys, "compare", str(swept), "--frames", "uniform:8", "linspace:8")
    assert "differ in frame indices" in printed.out and f"0 identical, {N_VIDEOS} differ" in printed.out


def test_a_side_with_two_different_frame_sets_must_be_narrowed(swept, capsys):
    code, printed = _run(capsys, "compare", str(swept), "--frames", "captioner=a", "linspace:8")
    assert code == 2 and "saw different frames" in printed.err


def test_two_run_folders_compare_too(swept, capsys, tmp_path):
    code, printed = _run(capsys, "compare", "--frames", str(swept), str(swept), "--json")
    assert code == 2 and "saw different frames" in printed.err  # each folder holds two frame specs
    code, printed = _run(capsys, "compare", "--frames", str(swept), "uniform:8")
    assert code == 2 and "needs RUN_DIR" in printed.err
    folders = {}
    for spec in ("vllm:8", "linspace:8"):  # two runs of one frame spec each, over the same generated videos
        sweep = write_sweep(tmp_path / spec.replace(":", "-"), "one", prompts=("brief",), frames=(spec,),
                            n_videos=N_VIDEOS, duration_s=1.5, protocols=(), judges=(), options={"n_resamples": None})
        folders[spec] = tmp_path / spec.replace(":", "-") / "out"
        assert cli_main(["sweep", str(sweep), "--out", str(folders[spec]), "--no-progress"]) == 0
    capsys.readouterr()
    # a clip longer than 8 frames: vLLM's sampler takes linspace's frames exactly
    code, printed = _run(capsys, "compare", "--frames", str(folders["vllm:8"]), str(folders["linspace:8"]), "--json")
    result = json.loads(printed.out)
    assert code == 0 and result["identical"] and result["counts"]["identical"] == N_VIDEOS
    code, printed = _run(capsys, "compare", str(swept), "--frames", str(folders["linspace:8"]), "uniform:8", "--json")
    assert code == 0 and json.loads(printed.out)["counts"]["differ"] == N_VIDEOS


def test_show_frames_prints_each_captions_ledger_escaped(swept, capsys):
    code, printed = _run(capsys, "show", str(swept), "--frames", "--system", "frame_spec=linspace:8", "--limit", "0")
    assert code == 0, printed.err
    assert printed.out.count("decoder    pyav (av ") == 2 * N_VIDEOS and "indices    0 " in printed.out
    assert f"{2 * N_VIDEOS} caption(s) matched" in printed.out
    assert_escaped(printed, "show --frames")
    code, printed = _run(capsys, "show", str(swept), "--frames", "--item", "shapes-000", "--json", "--limit", "0")
    records = json.loads(printed.out)["captions"]
    assert len(records) == 4 and {r["video_id"] for r in records} == {"shapes-000"}
    led = records[0]["frames_seen"]
    assert led["decoder"] == "pyav" and len(led["indices"]) == 8 and len(led["digest"]) == 64
    assert "\x1b" not in printed.out
    code, printed = _run(capsys, "show", str(swept), "--frames", "--system", "nope")
    assert code == 2 and "no caption matches" in printed.err


def test_a_rerun_hits_every_stored_caption(swept, capsys, tmp_path):
    """The ledger enters no key: the same sweep into the same folder captions nothing again."""
    sweep = swept.parent / "ledger.toml"
    code, printed = _run(capsys, "sweep", str(sweep), "--out", str(swept), "--no-progress")
    assert code == 0, printed.err[-2000:]
    assert f"captions: 0 new, {4 * N_VIDEOS} cached" in printed.out
