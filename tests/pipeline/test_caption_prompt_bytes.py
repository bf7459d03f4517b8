"""Prompts as written (issue 21): a caption-only sweep whose prompt comes from an OFFICIAL pack (CAPability's
caption/video, read in place from ../shared/protocols) sends the pack's text and its system message byte for byte
to an OpenAI-compatible captioner (a recording server on 127.0.0.1); frame timestamps go into the text only for a
captioner with `timestamps = "text"`, and that choice is in the caption key and the caption rows."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from _caption_server import RecordingServer
from _sweeps import write_sweep

from capeval.engine.sweep.config import SweepFileError, load_sweep
from capeval.engine.sweep.runner import run_sweep

REPO = Path(__file__).resolve().parents[2]
PACK = REPO.parent / "shared" / "protocols" / "capability.toml"


def _official(prompt_id: str) -> dict:
    """The pack's entry, read with tomllib alone (not through capeval's pack reader)."""
    with open(PACK, "rb") as f:
        return next(p for p in tomllib.load(f)["prompt"] if p["id"] == prompt_id)


def _sweep(path: Path, base_url: str) -> Path:
    common = {"base_url": base_url, "api_key": "test", "max_in_flight": 8}
    pack_prompt = {"id": "capability-official", "pack": str(PACK), "video": "caption/video", "image": "caption/image"}
    return write_sweep(path, "prompt-bytes", prompts=[pack_prompt], frames=("uniform:3",), n_videos=2, duration_s=1.0,
                       captioners=[{"name": "openai", "label": "as-written", "params": {"model": "plain", **common}},
                                   {"name": "openai", "label": "stamped", "timestamps": "text",
                                    "params": {"model": "stamped", **common}}],
                       protocols=(), judges=(), options={"n_resamples": None})


@pytest.mark.skipif(not PACK.is_file(), reason="the official packs are read in place from ../shared/protocols")
def test_an_official_caption_pack_is_sent_byte_for_byte(tmp_path, ray_local):
    official = _official("caption/video")
    with RecordingServer(latency_s=0.01) as server:
        result = run_sweep(load_sweep(_sweep(tmp_path / "s.toml", server.base_url)), tmp_path / "out",
                           progress=False, log=lambda m: None)
    assert result.exit_code == 0
    by_model: dict[str, list[dict]] = {}
    for body in server.bodies:
        by_model.setdefault(body["model"], []).append(body)
    assert len(by_model["plain"]) == len(by_model["stamped"]) == 2
    for body in by_model["plain"] + by_model["stamped"]:
        system, user = body["messages"]
        assert system == {"role": "system", "content": official["role_system"]}
        assert user["role"] == "user"
        images = [part for part in user["content"] if part["type"] == "image_url"]
        assert len(images) == 3  # uniform:3
    for body in by_model["plain"]:
        assert RecordingServer.user_text(body) == official["user"]  # byte for byte, trailing space included
    for body in by_model["stamped"]:
        text = RecordingServer.user_text(body)
        head = official["user"] + "\n(Frame timestamps in seconds: "
        assert text.startswith(head) and text.endswith(")")
        assert len(text[len(head):-1].split(", ")) == 3  # one time per frame

    import polars as pl

    captions = pl.read_parquet(tmp_path / "out" / "captions.parquet")
    assert captions.height == 4 and captions["item_status"].to_list() == ["ok"] * 4
    modes = dict(zip(captions["captioner"].to_list(), captions["timestamps_mode"].to_list()))
    assert modes == {"as-written": "none", "stamped": "text"}


def test_timestamps_must_be_none_or_text(tmp_path):
    path = _sweep(tmp_path / "s.toml", "http://127.0.0.1:9/v1")
    path.write_text(path.read_text().replace('timestamps = "text"', 'timestamps = "json"'))
    with pytest.raises(SweepFileError) as err:
        load_sweep(path)
    message = str(err.value.problems)
    assert "captioners[1].timestamps" in message and "'none', 'text'" in message and "line 24" in message
