"""`capeval show --provenance` states what the run read, not a sweep-file default: an `items` dataset is given by
its path, the SHA-256 of that file, the content digest that enters the cell keys and the counts of items and
videos as loaded (after `limit`), and no synthetic-kind parameter (n_videos, duration_s, seed). A real sweep (a
[[captions]] file, local judge, real local Ray) and the real command in a subprocess."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

from capeval.engine.sweep.config import load_sweep
from capeval.engine.sweep.datasets import load_dataset
from capeval.engine.sweep.runner import run_sweep

N_VIDEOS, N_QUESTIONS, LIMIT = 4, 2, 3


def test_provenance_gives_the_items_file_as_read(tmp_path, ray_local):
    items, captions = tmp_path / "items.jsonl", tmp_path / "captions.jsonl"
    with items.open("w") as f:
        for v in range(N_VIDEOS):
            for q in range(N_QUESTIONS):
                f.write(json.dumps({"item_id": f"v{v}/q{q}", "video_id": f"v{v}", "task": "counting",
                                    "annotation": f"How many red shapes in clip {v}, question {q}?",
                                    "options": ["1", "2", "3", "4"], "answer": "2", "category": "counting",
                                    "benchmark": "capquiz"}) + "\n")
    captions.write_text("".join(json.dumps({"video_id": f"v{v}", "caption": f"Two red shapes move in clip {v}."})
                                + "\n" for v in range(N_VIDEOS)))
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(f'name = "prov"\n[[datasets]]\nname = "quiz"\nkind = "items"\npath = "items.jsonl"\n'
                     f'limit = {LIMIT}\n[[captions]]\npath = "{captions}"\ncaptioner = "mymodel"\n'
                     '[[protocols]]\nname = "capquiz"\n[[judges]]\nname = "local"\n[options]\nn_resamples = 20\n')
    out = tmp_path / "out"
    assert run_sweep(load_sweep(sweep), out, progress=False, log=lambda m: None).exit_code == 0

    got = subprocess.run([sys.executable, "-m", "capeval.engine.cli", "show", str(out), "--provenance", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr
    (record,) = json.loads(got.stdout)
    dataset = record["dataset"]
    assert dataset["name"] == "quiz" and dataset["kind"] == "items"
    assert dataset["path"] == str(items.resolve())
    assert dataset["file_digest"] == hashlib.sha256(items.read_bytes()).hexdigest()[:32]
    assert dataset["n_items"] == LIMIT * N_QUESTIONS and dataset["n_videos"] == LIMIT and dataset["limit"] == LIMIT
    assert dataset["digest"]
    assert not {"n_videos", "duration_s", "seed"} & set(dataset["params"])
    assert "duration_s" not in json.dumps(dataset)
    # the content digest is the one the run's cells are keyed with: the dataset loaded again gives it
    config = load_sweep(sweep)
    again = load_dataset(config.datasets[0], out_dir=tmp_path / "again", sweep_dir=tmp_path, require_media=False)
    assert again.digest == dataset["digest"]

    text = subprocess.run([sys.executable, "-m", "capeval.engine.cli", "show", str(out), "--provenance"],
                          capture_output=True, text=True, timeout=300)
    assert text.returncode == 0 and dataset["file_digest"] in text.stdout and '"n_items": 6' in text.stdout
