"""Sweep files: strict validation with errors naming file, field and line; grid expansion."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from engine.sweep.config import SweepFileError, load_sweep
from engine.sweep.grid import caption_cells, expand

REPO = Path(__file__).resolve().parents[2]

BASE = """\
name = "t"
prompts = ["capquiz_standard", "brief"]
frames = ["uniform:4", 8, "fps:1,max=16"]

[[datasets]]
name = "shapes"
kind = "synthetic"
n_videos = 2

[[captioners]]
name = "local"

[[protocols]]
name = "capquiz"

[[judges]]
name = "local"
seeds = [0, 1]
"""


def write(tmp_path: Path, text: str, name: str = "sweep.toml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def test_valid_file_and_grid(tmp_path):
    cfg = load_sweep(write(tmp_path, BASE), check_registry=False)
    assert cfg.frames == ("uniform:4", "uniform:8", "fps:1,max=16")  # an int N means uniform:N
    assert cfg.judges[0].seeds == (0, 1)
    cells = expand(cfg)
    # 1 dataset x 1 captioner x 2 prompts x 3 frame specs x 1 protocol x 1 judge
    assert len(cells) == 6 and len(caption_cells(cfg)) == 6
    labels = [tuple(c.labels().values()) for c in cells]
    assert len(set(labels)) == 6
    assert labels[0] == ("shapes", "local", "capquiz_standard", "uniform:4", "capquiz", "local")


def test_grid_crosses_protocols_and_judges(tmp_path):
    from engine.prompts_library import get_prompt

    text = BASE + '\n[[judges]]\nname = "local"\nlabel = "local-b"\nparams = { threshold = 0.5 }\n'
    cfg = load_sweep(write(tmp_path, text), check_registry=False)
    cells = expand(cfg)
    assert len(cells) == 12 and len(caption_cells(cfg)) == 6  # judges share captions
    keys = {c.key(dataset_digest="d", captioner_revision="r", prompt_text=get_prompt(c.caption.prompt_id).text,
                  judge_revision="j") for c in cells}
    assert len(keys) == 12  # every cell gets its own content key
    with pytest.raises(SweepFileError, match=r"judges\[1\]: identical to judges\[0\]"):
        load_sweep(write(tmp_path, BASE + '\n[[judges]]\nname = "local"\nseeds = [0, 1]\nlabel = "b"\n'),
                   check_registry=False)


@pytest.mark.parametrize(
    "edit, expected",
    [
        (lambda t: t.replace('n_videos = 2', 'n_videos = 2\ncolour = "red"'), r"line 9: datasets\[0\]\.colour: unknown key 'colour'"),
        (lambda t: t.replace('n_videos = 2', 'n_videos = "two"'), r"line 8: datasets\[0\]\.n_videos: expected int, got str"),
        (lambda t: t.replace('seeds = [0, 1]', 'seeds = [0, "x"]'), r"judges\[0\]\.seeds: expected a non-empty list of integers"),
        (lambda t: t.replace('"brief"]', '"nope"]'), r"line 2: prompts\[1\]: unknown caption prompt 'nope'"),
        (lambda t: t.replace('8, "fps:1,max=16"', '"every frame"'), r"line 3: frames\[1\]: not a frame spec: 'every frame'"),
        (lambda t: t.replace('kind = "synthetic"', 'kind = "webdataset"'), r"line 7: datasets\[0\]\.kind: unknown dataset kind"),
        (lambda t: t.replace('name = "t"\n', ''), r"top level: missing required key 'name'"),
        (lambda t: t + "\n[options]\nbatch_size = true\n", r"options\.batch_size: expected int, got bool"),
    ],
)
def test_validation_errors_name_file_field_and_line(tmp_path, edit, expected):
    path = write(tmp_path, edit(BASE))
    with pytest.raises(SweepFileError, match=expected) as info:
        load_sweep(path, check_registry=False)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("kind, line", [("protocols", 'name = "capquiz"'), ("judges", 'name = "local"\nseeds'),
                                        ("captioners", 'name = "local"\n\n[[protocols]]')])
def test_unknown_registry_names_are_errors(tmp_path, kind, line):
    text = BASE.replace(line, line.replace('"capquiz"', '"nosuch"').replace('"local"', '"nosuch"'), 1)
    with pytest.raises(SweepFileError, match=rf"{kind}\[0\]\.name: unknown \w+ 'nosuch'; registered:"):
        load_sweep(write(tmp_path, text))


def test_registered_names_pass_registry_check(tmp_path):
    text = BASE.replace('name = "local"\nseeds = [0, 1]', 'name = "local"\nseeds = [0, 1]')
    cfg = load_sweep(write(tmp_path, text))  # capquiz protocol, local captioner and local judge are registered
    assert cfg.protocols[0].name == "capquiz"


def test_yaml_sweep_file(tmp_path):
    text = """\
    name: y
    prompts: [capquiz_standard]
    frames: [4]
    datasets:
      - {name: s, kind: synthetic, n_videos: 1}
    captioners:
      - {name: local}
    protocols:
      - {name: capquiz}
    judges:
      - name: local
        temperature: 0.5
    """
    with pytest.raises(SweepFileError, match=r"line 12: judges\[0\]\.temperature: unknown key"):
        load_sweep(write(tmp_path, text, "s.yaml"), check_registry=False)
    cfg = load_sweep(write(tmp_path, text.replace("        temperature: 0.5\n", ""), "s.yaml"), check_registry=False)
    assert cfg.frames == ("uniform:4",) and len(expand(cfg)) == 1


def test_shipped_example_sweeps_are_valid():
    demo = load_sweep(REPO / "examples" / "demo.toml")
    assert len(expand(demo)) == 4  # 2 prompts x 2 frame counts, one protocol, one judge
    gpu = load_sweep(REPO / "examples" / "capquiz_vllm_gpu.toml", check_registry=False)
    assert len(expand(gpu)) == 2 * 3 * 3
