"""Dataset kinds a protocol brings (its package's `capeval.dataset_kinds` entry points) and the staging hooks of a kind
(DatasetKind.extra_roots / files_in_folder): sweeps, `capeval submit` staging and caption files learn a protocol
only through its declarations, never by its name (issue 15).

Real components: the CAPability kind on a release laid out as released (annotations/<task>.jsonl, media under the
release root), and a protocol package written to a temporary folder, outside engine/, installed as a distribution's
metadata (a dist-info folder on PYTHONPATH declaring its entry points), run in a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from capeval.engine.staging import plan_staging

REPO = Path(__file__).resolve().parents[2]


def _capability_release(root: Path) -> None:
    """annotations/{scene,OCR}.jsonl whose records name images under the release root (root/images/...)."""
    (root / "annotations").mkdir(parents=True)
    (root / "images").mkdir()
    for task, n in (("scene", 2), ("OCR", 1)):
        rows = []
        for i in range(n):
            name = f"images/{task}_{i}.jpg"
            (root / name).write_bytes(b"\xff\xd8" + bytes(50 + i))
            rows.append({"file_id": f"{task}_{i}", "file_path": name, "annotation": "a street", "task": task,
                         "data_type": "image"})
        (root / "annotations" / f"{task}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_capability_staging_ships_the_asked_task_files_and_media_under_the_release_root(tmp_path):
    """The sweep names only annotations/: the kind's files_in_folder names the task files its loader reads (only
    the tasks asked for) and its extra_roots allows the release root, where the records' media lie."""
    release = tmp_path / "data" / "release"
    _capability_release(release)
    (tmp_path / "sweeps").mkdir()
    sweep = tmp_path / "sweeps" / "s.toml"
    sweep.write_text(f'name = "cap"\n[[datasets]]\nname = "cap"\nkind = "capability"\n'
                     f'path = "{release / "annotations"}"\ntasks = ["scene"]\n'
                     '[[captioners]]\nname = "local"\nprompts = ["brief"]\nframes = ["uniform:2"]\n')
    plan = plan_staging(sweep)
    shipped = {f.source.relative_to(release).as_posix(): f.staged for f in plan.files}
    assert set(shipped) == {"annotations/scene.jsonl", "images/scene_0.jpg", "images/scene_1.jpg"}
    # one root (the release root): the staged annotations folder and media keep their relative layout
    staged_annotations = plan.raw["datasets"][0]["path"]
    assert shipped["annotations/scene.jsonl"] == f"{staged_annotations}/scene.jsonl"
    assert shipped["images/scene_0.jpg"] == f"{staged_annotations.rpartition('/')[0]}/images/scene_0.jpg"
    assert release.resolve() in plan.roots


PLUGIN = '''
from capeval.engine.protocols.base import JudgeProtocol


class Hooked(JudgeProtocol):
    name = "hooked"
    judge_frames = "uniform:2"  # its judge sees frames
    pack_params = ("prompts", "rubric")
    tasks = ("hooked_task",)

    def check_params(self, mode, params):
        return [] if params.get("strictness", "high") == "high" else [("strictness", "only 'high' is known")]


PROTOCOL = Hooked()
'''

KIND = '''
"""`hooked`: table.jsonl in a folder; its rows name media relative to the folder's parent."""
import json
from pathlib import Path

import pyarrow as pa

from capeval.engine.datasets.registry import DatasetKind, DatasetLoad, Param, resolve
from capeval.engine.schemas import ITEMS, conform


def load(params, *, base_dir, out_dir, name):
    folder = resolve(base_dir, params["path"])
    rows = [json.loads(line) for line in (folder / "table.jsonl").read_text().splitlines()]
    media = {r["id"]: str(folder.parent / r["media"]) for r in rows}
    items = pa.table({"item_id": [r["id"] for r in rows], "video_id": [r["id"] for r in rows],
                      "task": ["hooked_task"] * len(rows), "media_path": list(media.values()),
                      "benchmark": ["hooked"] * len(rows)})
    return DatasetLoad(conform(items, ITEMS), media)


KIND = DatasetKind(
    "hooked", __doc__, (Param("path", (str,), "the folder", required=True, path="dir"),), load, reads_only=True,
    extra_roots=lambda path, params: [path.parent],
    files_in_folder=lambda folder, params: [folder / "table.jsonl"],
)
'''

PROBE = '''
import json, sys
from pathlib import Path

from capeval.engine.registry import names
from capeval.engine.inputs.tables import _captioner_from_path
from capeval.engine.staging import plan_staging
from capeval.engine.sweep.config import load_sweep
from capeval.engine.sweep.datasets import media_required
from capeval.engine.sweep.validation import protocol_param_problems

root = Path(sys.argv[1])
config = load_sweep(root / "sweeps" / "s.toml")
plan = plan_staging(root / "sweeps" / "s.toml")
print(json.dumps({
    "kinds": names("dataset_kind"),
    "media_required": media_required(config, config.datasets[0]),
    "problems": protocol_param_problems({"rubric": "nope.toml", "strictness": "low"}, root, protocol="hooked"),
    "captioner": _captioner_from_path(Path("/x/model_a/hooked_task.jsonl")),
    "shipped": sorted(f.source.relative_to(root.resolve()).as_posix() for f in plan.files),
    "rubric": plan.raw["protocols"][0]["params"]["rubric"],
}))
'''


def test_a_protocol_outside_engine_brings_its_dataset_kind_frames_packs_tasks_and_param_checks(tmp_path):
    """A protocol package outside engine/ declares a dataset kind (an entry point beside its protocol's), judge
    frames, a second pack param, its tasks and its own param check; the registry, sweep validation, media check,
    staging and caption-file reading all follow those declarations."""
    pkg = tmp_path / "site" / "hooked_protocol"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(textwrap.dedent(PLUGIN))
    (pkg / "kind.py").write_text(textwrap.dedent(KIND))
    dist = tmp_path / "site" / "hooked_protocol-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: hooked-protocol\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[capeval.protocols]\nhooked = hooked_protocol:PROTOCOL\n\n"
                                           "[capeval.dataset_kinds]\nhooked = hooked_protocol.kind:KIND\n")
    data = tmp_path / "data"
    (data / "set" / "clips").mkdir(parents=True)
    (data / "set" / "clips" / "a.mp4").write_bytes(b"\0" * 64)
    (data / "set" / "folder").mkdir()
    (data / "set" / "folder" / "table.jsonl").write_text(json.dumps({"id": "a", "media": "clips/a.mp4"}) + "\n")
    (tmp_path / "sweeps").mkdir()
    (tmp_path / "sweeps" / "rubric.toml").write_text('[[prompt]]\nid = "grade"\nuser = "Grade {caption}."\n')
    captions = tmp_path / "sweeps" / "caps.jsonl"
    captions.write_text(json.dumps({"video_id": "a", "caption": "A ball."}) + "\n")
    (tmp_path / "sweeps" / "s.toml").write_text(
        f'name = "hooked"\n[[datasets]]\nname = "d"\nkind = "hooked"\npath = "{data / "set" / "folder"}"\n'
        f'[[captions]]\npath = "caps.jsonl"\n'
        f'[[protocols]]\nname = "hooked"\nparams = {{ rubric = "rubric.toml" }}\n[[judges]]\nname = "local"\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert "hooked" in out["kinds"] and {"capability", "vidcapbench"} <= set(out["kinds"])
    assert out["media_required"] is True  # captions come from a file, but the judge sees frames
    assert sorted(map(tuple, out["problems"])) == [
        ("rubric", f"prompt pack not found: {tmp_path / 'nope.toml'}"), ("strictness", "only 'high' is known")]
    assert out["captioner"] == "model_a"  # a task the protocol declares: the folder names the captioner
    # the folder's table (files_in_folder), the media beside it (under extra_roots), the caption file and the
    # protocol's second pack param (pack_params)
    assert out["shipped"] == ["data/set/clips/a.mp4", "data/set/folder/table.jsonl", "sweeps/caps.jsonl",
                              "sweeps/rubric.toml"]
    assert out["rubric"].startswith("data/") and out["rubric"].endswith("/rubric.toml")
