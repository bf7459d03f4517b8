"""Sweep files: strict validation with errors naming file, field and line; grid expansion."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from capeval.engine.cli.demo import DEMO_FILE
from capeval.engine.errors import UsageError
from capeval.engine.sweep.config import SweepFileError, load_sweep
from capeval.engine.sweep.grid import caption_cells, expand

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
    from capeval.engine.prompts_library import get_prompt

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
    demo = load_sweep(DEMO_FILE)
    assert len(expand(demo)) == 4  # 2 prompts x 2 frame counts, one protocol, one judge
    # written for a GPU cluster: its items file is not in this checkout
    gpu = load_sweep(REPO / "examples" / "capquiz_vllm_gpu.toml", check_registry=False, check_paths=False)
    assert len(expand(gpu)) == 2 * 3 * 3
    mixed = load_sweep(REPO / "examples" / "mixed_media.toml", check_paths=False)  # my_media/ is the user's
    assert [c.caption.prompt_id for c in expand(mixed)] == ["detailed", "short"]
    release = load_sweep(REPO / "examples" / "capability_release.toml")
    assert len(expand(release)) == 2 and release.protocols[0].params["mode"] == "official"
    captions = load_sweep(REPO / "examples" / "released_captions.toml")
    assert [c.caption.from_file for c in expand(captions)] == [True]
    from capeval.engine.sweep.datasets import load_dataset, media_required

    # judged from released captions by a text-only judge: the release's images need not be present
    assert not media_required(captions, captions.datasets[0]) and media_required(mixed, mixed.datasets[0])
    with pytest.raises(UsageError, match=r"media files not found"):
        load_dataset(captions.datasets[0], out_dir=REPO / ".capeval", sweep_dir=captions.path.parent)
    data = load_dataset(captions.datasets[0], out_dir=REPO / ".capeval", sweep_dir=captions.path.parent,
                        require_media=False)
    assert data.items.num_rows == 994


# --- validation before work (issue 8 finding 3): every problem at once, with the run's own parsers -------------

ALL_BAD = """\
name = "bad"
prompts = ["brief"]
frames = ["uniform:0", "fps:0", "bogus:3", "uniform:2.5", "fps:1,max=0", "linspace:8"]

[[datasets]]
name = "shapes"
kind = "synthetic"
duration_s = -1

[[captioners]]
name = "local"
params = { temperature = 0.2 }
max_tokens = 0

[[protocols]]
name = "capquiz"
params = { mode = "paper", judge_frames = "uniform:-3" }

[[judges]]
name = "replay"

[options]
n_resamples = -5
judge_batch_size = 0
"""


def test_every_problem_reported_at_once_with_lines(tmp_path):
    path = write(tmp_path, ALL_BAD)
    with pytest.raises(SweepFileError) as info:
        load_sweep(path)
    problems = info.value.problems
    text = "\n".join(problems)
    expected = [
        r"line 3: frames\[0\]: not a frame spec: 'uniform:0'", r"frames\[1\]: not a frame spec: 'fps:0'",
        r"frames\[2\]: not a frame spec: 'bogus:3'.*unknown kind", r"frames\[3\]: .*'2.5' is not an integer",
        r"frames\[4\]: not a frame spec: 'fps:1,max=0'", r"line 8: datasets\[0\]\.duration_s: must be a positive",
        r"line 12: captioners\[0\]\.params: captioner 'local' does not accept 'temperature' \(valid: answers, latency_s, max_in_flight, name\)",
        r"line 13: captioners\[0\]\.max_tokens: must be at least 1",
        r"line 17: protocols\[0\]\.params\.mode: expected one of", r"protocols\[0\]\.params\.judge_frames",
        r"judges\[0\]\.params: judge 'replay' needs 'replies'",
        r"line 23: options\.n_resamples: must be 0 \(no CIs\) or more, got -5",
        r"line 24: options\.judge_batch_size: must be at least 1, got 0",
    ]
    import re

    for pattern in expected:
        assert re.search(pattern, text), f"{pattern!r} not in:\n{text}"
    assert len(problems) == len(expected)
    assert all(p.startswith(str(path)) for p in problems)
    assert "linspace:8" not in text  # a valid spec is not reported


def test_unknown_param_names_the_valid_ones_for_http_backends(tmp_path):
    text = BASE.replace('[[judges]]\nname = "local"', '[[judges]]\nname = "openai"\nparams = { modle = "gpt-4.1" }')
    with pytest.raises(SweepFileError, match=r"judge 'openai' does not accept 'modle' \(valid: .*\bmodel\b"):
        load_sweep(write(tmp_path, text))


def test_validate_config_checks_the_output_folder(tmp_path):
    from capeval.engine.sweep.validation import validate_config

    cfg = load_sweep(write(tmp_path, BASE))
    assert validate_config(cfg, tmp_path / "new" / "out") == []
    blocker = tmp_path / "file"
    blocker.write_text("x")
    problems = validate_config(cfg, blocker / "out")
    assert len(problems) == 1 and "output folder" in problems[0] and "is a file" in problems[0]
    locked = tmp_path / "ro"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        import os

        if os.geteuid() != 0:  # root writes anywhere
            assert "not writable" in validate_config(cfg, locked / "out")[0]
    finally:
        locked.chmod(0o700)


# --- inputs: prompt texts, packs, caption files, caption-only sweeps, dataset kinds ---------------------------

def test_prompt_tables_text_file_and_pack_with_media_variants(tmp_path, shared_data):
    from capeval.engine.prompts_library import get_prompt

    (tmp_path / "p.txt").write_text("Say what happens in the clip.\n")
    pack = shared_data.parent / "protocols" / "capability.toml"
    text = BASE.replace('prompts = ["capquiz_standard", "brief"]\n', "") + f"""
[[prompts]]
id = "mine"
text = "Tell me about this clip."
image = "Tell me about this picture."

[[prompts]]
id = "from-file"
file = "p.txt"

[[prompts]]
id = "cap-official"
pack = "{pack}"
video = "caption/video"
image = "caption/image"
"""
    cfg = load_sweep(write(tmp_path, text))
    assert cfg.prompts == ("mine", "from-file", "cap-official")
    mine = get_prompt("mine")
    assert mine.text_for("image") == "Tell me about this picture." and mine.text_for("video") != mine.text_for("image")
    assert get_prompt("from-file").text == "Say what happens in the clip."
    official = get_prompt("cap-official")
    import tomllib

    raw = {p["id"]: p for p in tomllib.loads(pack.read_text())["prompt"]}
    assert official.text_for("image") == raw["caption/image"]["user"]  # verbatim, trailing space included
    assert official.text_for("video") == raw["caption/video"]["user"]
    assert official.system == raw["caption/video"]["role_system"]
    keys = {c.caption.prompt_key_text() for c in expand(cfg)}
    assert len(keys) == 3
    bad = text.replace('video = "caption/video"', 'video = "caption/nope"')
    with pytest.raises(SweepFileError, match=r"prompts\[2\]: .*no prompt with id 'caption/nope'"):
        load_sweep(write(tmp_path, bad.replace('id = "cap-official"', 'id = "cap-official-2"')))


def test_caption_files_and_caption_only_sweep(tmp_path):
    caps = tmp_path / "caps.jsonl"
    caps.write_text('{"video_id": "shapes-000", "caption": "a red circle"}\n'
                    '{"video_id": "shapes-001", "caption": "a blue square"}\n')
    text = BASE + f'\n[[captions]]\npath = "caps.jsonl"\ncaptioner = "my-model"\n'
    cfg = load_sweep(write(tmp_path, text))
    cells = caption_cells(cfg)
    from_file = [c for c in cells if c.from_file]
    assert len(cells) == 7 and len(from_file) == 1 and from_file[0].captioner.display == "my-model"
    assert len(expand(cfg)) == 7  # file captions are judged like any other caption cell
    from capeval.engine.sweep.grid import file_captions

    table = file_captions(from_file[0])
    assert table.column("text").to_pylist() == ["a red circle", "a blue square"]
    # caption-only: no protocols, no judges
    only = BASE.split("[[protocols]]")[0]
    cfg = load_sweep(write(tmp_path, only, "only.toml"))
    assert cfg.caption_only and expand(cfg) == [] and len(caption_cells(cfg)) == 6
    # captions only from files: no captioner, prompts or frames needed
    files_only = ('name = "f"\n[[datasets]]\nname = "shapes"\nkind = "synthetic"\n'
                  '[[captions]]\npath = "caps.jsonl"\n[[protocols]]\nname = "capquiz"\n[[judges]]\nname = "local"\n')
    cfg = load_sweep(write(tmp_path, files_only, "f.toml"))
    assert [c.caption.captioner.display for c in expand(cfg)] == ["caps"]
    caps.write_text('{"video_id": "a", "caption": "x"}\n{"video_id": "a", "caption": "y"}\n')
    with pytest.raises(SweepFileError, match=r"captions\[0\]\.path: .*duplicate caption ids"):
        load_sweep(write(tmp_path, files_only, "f.toml"))


def test_protocol_params_and_captioner_max_tokens(tmp_path, shared_data):
    pack = shared_data.parent / "protocols" / "vcinspector.toml"
    text = BASE.replace('[[protocols]]\nname = "capquiz"',
                        f'[[protocols]]\nname = "vcinspector"\nparams = {{ mode = "official", prompts = "{pack}", '
                        f'judge_frames = "linspace:32" }}')
    text = text.replace('[[captioners]]\nname = "local"', '[[captioners]]\nname = "local"\nmax_tokens = 2048')
    cfg = load_sweep(write(tmp_path, text))
    assert cfg.protocols[0].params == {"mode": "official", "prompts": str(pack.resolve()), "judge_frames": "linspace:32"}
    assert cfg.captioners[0].max_tokens == 2048
    rel = text.replace(str(pack), "nope/vcinspector.toml")
    with pytest.raises(SweepFileError, match=r"protocols\[0\]\.params\.prompts: prompt pack not found"):
        load_sweep(write(tmp_path, rel))


def _mixed_media(folder: Path) -> None:
    import numpy as np
    from PIL import Image

    from capeval.engine.datasets.synthetic_videos import make_video

    folder.mkdir(parents=True)
    make_video(folder / "clip_a.mp4", codec="libx264", seconds=1.0, fps=8, size=(64, 48), seed=1)
    (folder / "sub").mkdir()
    make_video(folder / "sub" / "clip_b.mp4", codec="libx264", seconds=1.0, fps=8, size=(64, 48), seed=2)
    pix = np.random.default_rng(0).integers(0, 255, (40, 50, 3), dtype=np.uint8)
    Image.fromarray(pix).save(folder / "photo.png")
    Image.fromarray(pix).save(folder / "sub" / "snap.jpg")
    (folder / "notes.txt").write_text("not media")


def test_videos_kind_folder_of_mixed_media(tmp_path):
    from capeval.engine.sweep.datasets import load_dataset

    _mixed_media(tmp_path / "media")
    text = f"""\
name = "mixed"
prompts = ["brief", "detailed"]
frames = ["uniform:4"]

[[datasets]]
name = "mine"
kind = "videos"
path = "media"

[[captioners]]
name = "local"

[[protocols]]
name = "vcinspector"
params = {{ judge_frames = "linspace:8" }}

[[judges]]
name = "local"
"""
    cfg = load_sweep(write(tmp_path, text))
    data = load_dataset(cfg.datasets[0], out_dir=tmp_path / "out", sweep_dir=tmp_path)
    assert sorted(data.videos) == ["clip_a", "photo", "sub/clip_b", "sub/snap"]
    assert data.media_types == {"clip_a": "video", "photo": "image", "sub/clip_b": "video", "sub/snap": "image"}
    assert len(expand(cfg)) == 2
    glob_cfg = load_sweep(write(tmp_path, text.replace('path = "media"', 'path = "media/**/*.jpg"'), "g.toml"))
    assert list(load_dataset(glob_cfg.datasets[0], out_dir=tmp_path, sweep_dir=tmp_path).videos) == ["sub/snap"]
    with pytest.raises(SweepFileError, match=r"line 8: datasets\[0\]\.path: no videos or images"):
        load_sweep(write(tmp_path, text.replace('path = "media"', 'path = "media/*.txt"'), "n.toml"))
    with pytest.raises(SweepFileError, match=r"line 8: datasets\[0\]\.path: no file matches .*\*\.mkv"):
        load_sweep(write(tmp_path, text.replace('path = "media"', 'path = "media/*.mkv"'), "n.toml"))


def test_sweep_check_command_prints_every_problem_and_exits_usage(tmp_path, capsys):
    from capeval.engine.cli import main
    from capeval.engine.exitcodes import OK, USAGE

    path = write(tmp_path, ALL_BAD)
    assert main(["sweep", str(path), "--check"]) == USAGE
    err = capsys.readouterr().err
    assert "13 problems" in err and err.count(str(path)) == 13
    assert main(["sweep", str(write(tmp_path, BASE, "ok.toml")), "--check"]) == OK
    assert "valid; 6 cells" in capsys.readouterr().out
