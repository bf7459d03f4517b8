"""Credentials never enter content keys: a sweep's cell keys and caption keys are the same whatever API key the
judge or captioner is given (a rotated key redoes nothing, and no key is hashed into a file name), while every
other parameter still changes them."""

from __future__ import annotations

from _sweeps import write_sweep

from capeval.engine.sweep.config import load_sweep
from capeval.engine.sweep.grid import expand


def _keys(tmp_path, api_key: str | None, timeout: float = 30.0) -> list[str]:
    params = {"model": "m", "base_url": "http://127.0.0.1:9/v1", "timeout_s": timeout,
              **({"api_key": api_key} if api_key else {})}
    path = write_sweep(tmp_path / f"sweep-{api_key}-{timeout}.toml", "k", prompts=("brief",), frames=("uniform:2",),
                       dataset={"name": "d", "kind": "synthetic", "n_videos": 1},
                       judges=[{"name": "openai", "params": params}])
    config = load_sweep(path)
    return [cell.key(dataset_digest="d", captioner_revision="r", prompt_text="p", judge_revision="j")
            for cell in expand(config)]


def test_cell_keys_ignore_the_api_key_but_not_other_params(tmp_path):
    plain, one, other = _keys(tmp_path, None), _keys(tmp_path, "sk-first-key-123"), _keys(tmp_path, "sk-second-key-456")
    assert plain == one == other
    assert _keys(tmp_path, "sk-first-key-123", timeout=31.0) != one


def test_caption_keys_ignore_the_api_key(tmp_path):
    from capeval.engine.sweep.captioning import caption_key_at
    from capeval.engine.sweep.config import ComponentSpec

    def key(params):
        return caption_key_at({"frames_key": "f"}, ComponentSpec(name="openai", params=params), "rev", "brief")

    base = {"model": "m", "base_url": "http://127.0.0.1:9/v1"}
    assert key(base) == key({**base, "api_key": "sk-first-key-123"}) == key({**base, "api_key": "sk-other-456"})
    assert key(base) != key({**base, "model": "m2"})
