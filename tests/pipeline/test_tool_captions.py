"""Captions from the tools people already run (issue 29, item 3; docs/inputs.md "Captions from other tools"):
lmms-eval's `--log_samples` JSONL, VLMEvalKit's prediction .xlsx/.tsv and inspect_ai's eval logs (.json and the
zipped .eval), each written here in the tool's own layout, are judged by `capeval judge --captions-format` and in a
sweep's `[[captions]] format`, with each caption under its video and its model as the captioner label; a record
that cannot be read is an error naming the file and the row."""

from __future__ import annotations

import json
import re
import sys
import zipfile
from pathlib import Path

import polars as pl
import pytest

from capeval.engine.cli import main
from capeval.engine.errors import UsageError
from capeval.engine.inputs import read_captions
from capeval.engine.sweep.checker import SweepFileError
from capeval.engine.sweep.config import load_sweep
from capeval.engine.sweep.runner import run_sweep

VIDEOS = ["v0", "v1", "v2"]
CAPTION = {v: f"{n + 1} shapes move across a grey field in clip {v}." for n, v in enumerate(VIDEOS)}


def _items(tmp_path: Path) -> Path:
    """CapQuiz items for three videos, their media files under video/ (as DREAM-1K's VLMEvalKit TSV names them)."""
    (tmp_path / "video").mkdir(exist_ok=True)
    path = tmp_path / "items.jsonl"
    with path.open("w") as f:
        for n, v in enumerate(VIDEOS):
            (tmp_path / "video" / f"{v}.mp4").write_bytes(b"")
            f.write(json.dumps({"item_id": f"{v}/q", "video_id": v, "media_path": f"video/{v}.mp4",
                                "task": "counting", "annotation": "How many shapes are visible?",
                                "options": ["1", "2", "3", "4"], "answer": str(n + 1), "category": "counting",
                                "benchmark": "capquiz"}) + "\n")
    return path


def lmms_eval_samples(folder: Path, *, model: str = "Qwen__Qwen2-VL-2B-Instruct", keep_doc: bool = True) -> Path:
    """`--log_samples` output: <output_path>/<model_name_sanitized>/<date>_samples_<task>.jsonl, one sample per
    line (doc_id, doc, target, arguments, resps, filtered_resps, hashes, the task's metric; the tracker drops `doc`
    and `arguments` and keeps `input` in the versions that sanitise samples)."""
    path = folder / model / "20250101_120000_samples_video_caption.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for n, v in enumerate(VIDEOS):
            sample = {"doc_id": n, "target": "", "resps": [[CAPTION[v]]], "filtered_resps": [CAPTION[v]],
                      "doc_hash": f"{n:064x}", "prompt_hash": f"{n + 7:064x}", "target_hash": f"{n + 9:064x}",
                      "gpt_eval_score": {"video_id": v, "pred": CAPTION[v]}}
            if keep_doc:
                sample |= {"doc": {"video_id": v, "question": "Describe the video."},
                           "arguments": ["Describe the video.", {"max_new_tokens": 512}]}
            else:
                sample["input"] = "Describe the video."
            f.write(json.dumps(sample) + "\n")
    return path


def vlmevalkit_rows(rows: list[dict] | None = None) -> tuple[list[str], list[list]]:
    """A video caption dataset's TSV columns (index, video, question, answer) with the model's `prediction`."""
    header = ["index", "video", "question", "answer", "prediction"]
    body = rows or [{"index": n, "video": f"video/{v}", "question": "Describe the video.", "answer": "(reference)",
                     "prediction": CAPTION[v]} for n, v in enumerate(VIDEOS)]
    return header, [[r.get(h) for h in header] for r in body]


def vlmevalkit_xlsx(folder: Path, rows: list[dict] | None = None, *, model: str = "InternVL2_5-8B") -> Path:
    """<work_dir>/<model>/<model>_<dataset>_<nframe>frame.xlsx as VLMEvalKit dumps it (header in row 1)."""
    import openpyxl

    path = folder / model / f"{model}_DREAM-1K_8frame.xlsx"
    path.parent.mkdir(parents=True, exist_ok=True)
    book = openpyxl.Workbook()
    header, body = vlmevalkit_rows(rows)
    book.active.append(header)
    for row in body:
        book.active.append(row)
    book.save(path)
    return path


def vlmevalkit_tsv(folder: Path, *, model: str = "InternVL2_5-8B") -> Path:
    path = folder / model / f"{model}_DREAM-1K_8frame.tsv"
    path.parent.mkdir(parents=True, exist_ok=True)
    header, body = vlmevalkit_rows()
    path.write_text("\n".join("\t".join(str(c) for c in row) for row in [header, *body]) + "\n")
    return path


def _inspect_sample(n: int, v: str, *, text: str | None = None, epoch: int = 1) -> dict:
    text = CAPTION[v] if text is None else text
    return {"id": v, "epoch": epoch, "input": "Describe the video.", "target": "",
            "messages": [{"role": "user", "content": "Describe the video."},
                         {"role": "assistant", "content": text, "source": "generate"}],
            "output": {"model": "gpt-4o-mini-2024-07-18",
                       "choices": [{"message": {"role": "assistant", "source": "generate",
                                                "content": [{"type": "reasoning", "reasoning": "Counting shapes."},
                                                            {"type": "text", "text": text}]},
                                    "stop_reason": "stop"}],
                       "completion": text, "usage": {"input_tokens": 900, "output_tokens": 20, "total_tokens": 920},
                       "time": 1.5},
            "scores": {}, "metadata": {"clip": f"clip-{n}", "video_id": v}}


def _inspect_header(model: str) -> dict:
    return {"version": 2, "status": "success",
            "eval": {"eval_id": "abc", "run_id": "def", "created": "2025-01-01T12:00:00+00:00",
                     "task": "video_caption", "task_id": "t1", "model": model,
                     "dataset": {"name": "clips", "samples": len(VIDEOS), "sample_ids": VIDEOS},
                     "config": {"epochs": 1}},
            "plan": {"name": "plan", "steps": [{"solver": "generate", "params": {}}]},
            "results": {"total_samples": len(VIDEOS), "completed_samples": len(VIDEOS), "scores": []},
            "stats": {"started_at": "2025-01-01T12:00:00+00:00", "completed_at": "2025-01-01T12:01:00+00:00"}}


def inspect_json(folder: Path, samples: list | None = None, *, model: str = "openai/gpt-4o-mini") -> Path:
    """An EvalLog written with `--log-format json`: the header's fields and `samples`."""
    path = folder / "2025-01-01T12-00-00+00-00_video-caption_abc.json"
    folder.mkdir(parents=True, exist_ok=True)
    log = _inspect_header(model) | {"samples": samples if samples is not None else
                                    [_inspect_sample(n, v) for n, v in enumerate(VIDEOS)]}
    path.write_text(json.dumps(log, indent=2))
    return path


def inspect_eval(folder: Path, *, model: str = "openai/gpt-4o-mini") -> Path:
    """The default `.eval` log: a zip with header.json and samples/<id>_epoch_<n>.json."""
    path = folder / "2025-01-01T12-00-00+00-00_video-caption_abc.eval"
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("_journal/start.json", json.dumps({"version": 2}))
        archive.writestr("header.json", json.dumps(_inspect_header(model)))
        for n, v in enumerate(VIDEOS):
            archive.writestr(f"samples/{v}_epoch_1.json", json.dumps(_inspect_sample(n, v)))
            again = _inspect_sample(n, v, text="another try", epoch=2)
            archive.writestr(f"samples/{v}_epoch_2.json", json.dumps(again))
    return path


def at(path: Path) -> str:
    """The file's name as a regular expression (tmp paths hold `+`)."""
    return re.escape(str(path))


def _texts(table) -> dict[str, str]:
    return dict(zip(table.column("video_id").to_pylist(), table.column("text").to_pylist()))


# reading ---------------------------------------------------------------------------------------------------------

def test_lmms_eval_samples_named_by_a_doc_field_labelled_by_the_model_folder(tmp_path):
    table = read_captions(lmms_eval_samples(tmp_path / "logs"), caption_format="lmms-eval", id_field="doc.video_id")
    assert _texts(table) == CAPTION
    assert set(table.column("captioner").to_pylist()) == {"Qwen__Qwen2-VL-2B-Instruct"}


def test_lmms_eval_doc_id_is_the_default_id(tmp_path):
    table = read_captions(lmms_eval_samples(tmp_path / "logs", keep_doc=False), caption_format="lmms-eval")
    assert _texts(table) == {str(n): CAPTION[v] for n, v in enumerate(VIDEOS)}


def test_vlmevalkit_xlsx_and_tsv_give_the_same_captions_under_the_video_column(tmp_path):
    xlsx = read_captions(vlmevalkit_xlsx(tmp_path / "outputs"), caption_format="vlmevalkit")
    tsv = read_captions(vlmevalkit_tsv(tmp_path / "tsv"), caption_format="vlmevalkit")
    assert _texts(xlsx) == _texts(tsv) == {f"video/{v}": CAPTION[v] for v in VIDEOS}
    assert set(xlsx.column("captioner").to_pylist()) == {"InternVL2_5-8B"}
    by_index = read_captions(vlmevalkit_xlsx(tmp_path / "idx"), caption_format="vlmevalkit", id_field="index")
    assert sorted(by_index.column("video_id").to_pylist()) == ["0", "1", "2"]


def test_vlmevalkit_run_folder_is_skipped_for_the_model_label(tmp_path):
    path = vlmevalkit_xlsx(tmp_path / "outputs" / "Qwen2.5-VL-7B-Instruct", model="T20250101_Gabcdef")
    assert set(read_captions(path, caption_format="vlmevalkit").column("captioner").to_pylist()) == {
        "Qwen2.5-VL-7B-Instruct"}


def test_vlmevalkit_failed_and_missing_predictions_are_caption_failures(tmp_path):
    rows = [{"index": 0, "video": "video/v0", "prediction": CAPTION["v0"]},
            {"index": 1, "video": "video/v1", "prediction": "Failed to obtain answer via API."},
            {"index": 2, "video": "video/v2", "prediction": None}]
    table = read_captions(vlmevalkit_xlsx(tmp_path, rows), caption_format="vlmevalkit")
    by_video = {r["video_id"]: r for r in table.to_pylist()}
    assert by_video["video/v0"]["text"] == CAPTION["v0"] and by_video["video/v0"]["error"] is None
    assert by_video["video/v1"]["text"] is None and "Failed to obtain answer" in by_video["video/v1"]["error"]
    assert by_video["video/v2"]["text"] is None and by_video["video/v2"]["error"] == (
        f"{tmp_path / 'InternVL2_5-8B' / 'InternVL2_5-8B_DREAM-1K_8frame.xlsx'}: sheet row 4: "
        f"the model's reply is empty")


def test_inspect_json_and_eval_logs_labelled_by_eval_model(tmp_path):
    for path in (inspect_json(tmp_path / "json"), inspect_eval(tmp_path / "eval")):
        table = read_captions(path, caption_format="inspect")
        assert _texts(table) == CAPTION, path  # the text parts only; later epochs are not read
        assert set(table.column("captioner").to_pylist()) == {"openai/gpt-4o-mini"}
    by_meta = read_captions(inspect_json(tmp_path / "meta"), caption_format="inspect", id_field="metadata.clip")
    assert sorted(by_meta.column("video_id").to_pylist()) == ["clip-0", "clip-1", "clip-2"]


def test_inspect_sample_error_is_a_caption_failure(tmp_path):
    samples = [_inspect_sample(0, "v0"), {**_inspect_sample(1, "v1"), "output": {"model": "m", "choices": []},
                                          "error": {"message": "RateLimitError: too many requests",
                                                    "traceback": "..."}}]
    table = read_captions(inspect_json(tmp_path, samples), caption_format="inspect")
    errors = dict(zip(table.column("video_id").to_pylist(), table.column("error").to_pylist()))
    assert errors == {"v0": None, "v1": "inspect_ai: RateLimitError: too many requests"}


def test_a_captioner_label_given_wins_over_the_model_the_file_names(tmp_path):
    table = read_captions(inspect_json(tmp_path), caption_format="inspect", captioner="mine")
    assert set(table.column("captioner").to_pylist()) == {"mine"}


# malformed records: file and row ------------------------------------------------------------------------------

def test_lmms_eval_record_without_the_id_field_names_file_and_line(tmp_path):
    path = lmms_eval_samples(tmp_path)
    lines = path.read_text().splitlines()
    lines[1] = json.dumps({k: v for k, v in json.loads(lines[1]).items() if k != "doc"})
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(UsageError, match=rf"{at(path)}: line 2: no 'doc.video_id' to name the video .*doc_id"):
        read_captions(path, caption_format="lmms-eval", id_field="doc.video_id")


def test_lmms_eval_malformed_line_and_non_text_response_name_the_line(tmp_path):
    path = lmms_eval_samples(tmp_path)
    path.write_text(path.read_text() + "{not json\n")
    with pytest.raises(UsageError, match=rf"{at(path)}:4: malformed JSON"):
        read_captions(path, caption_format="lmms-eval", id_field="doc.video_id")
    path.write_text(json.dumps({"doc_id": 0, "filtered_resps": [{"text": "x"}]}) + "\n")
    with pytest.raises(UsageError, match=rf"{at(path)}: line 1, field 'filtered_resps': the response is dict"):
        read_captions(path, caption_format="lmms-eval")
    path.write_text(json.dumps({"doc_id": 0, "target": "x"}) + "\n")
    with pytest.raises(UsageError, match=rf"{at(path)}: line 1: no `filtered_resps` or `resps`"):
        read_captions(path, caption_format="lmms-eval")


def test_vlmevalkit_bad_rows_name_file_and_sheet_row(tmp_path):
    rows = [{"index": 0, "video": "video/v0", "prediction": CAPTION["v0"]},
            {"index": 1, "video": None, "prediction": CAPTION["v1"]}]
    path = vlmevalkit_xlsx(tmp_path, rows)
    with pytest.raises(UsageError, match=rf"{at(path)}: sheet row 3: 'video' is null, not an id"):
        read_captions(path, caption_format="vlmevalkit")
    import openpyxl

    book = openpyxl.Workbook()
    book.active.append(["index", "video", "question"])
    book.active.append([0, "video/v0", "Describe the video."])
    book.save(path)
    with pytest.raises(UsageError, match=rf"{at(path)}: sheet row 2: no `prediction` column"):
        read_captions(path, caption_format="vlmevalkit")


def test_xlsx_without_openpyxl_names_the_extra(tmp_path, monkeypatch):
    path = vlmevalkit_xlsx(tmp_path)
    monkeypatch.setitem(sys.modules, "openpyxl", None)  # an environment without the xlsx extra
    with pytest.raises(UsageError, match=r"pip install 'capeval\[xlsx\]'"):
        read_captions(path, caption_format="vlmevalkit")


def test_inspect_bad_samples_name_file_and_sample(tmp_path):
    samples = [_inspect_sample(0, "v0"), {**_inspect_sample(1, "v1"), "id": None}]
    path = inspect_json(tmp_path, samples)
    with pytest.raises(UsageError, match=rf"{at(path)}: sample 2: 'id' is null, not an id"):
        read_captions(path, caption_format="inspect")
    bad = {**_inspect_sample(1, "v1"), "output": {"completion": None, "choices": [{"message": {"content": 7}}]}}
    path = inspect_json(tmp_path, [_inspect_sample(0, "v0"), bad])
    with pytest.raises(UsageError, match=rf"{at(path)}: sample 2 \(id 'v1'\), field 'output.choices\[0\].message"):
        read_captions(path, caption_format="inspect")
    path.write_text(json.dumps({"eval": {"model": "m"}}))
    with pytest.raises(UsageError, match="no `samples` list"):
        read_captions(path, caption_format="inspect")


def test_id_field_without_a_tool_format_and_unknown_formats_are_refused(tmp_path):
    captions = tmp_path / "captions.jsonl"
    captions.write_text(json.dumps({"video_id": "v0", "caption": "x"}) + "\n")
    with pytest.raises(UsageError, match="id_field: applies to another tool's output only"):
        read_captions(captions, id_field="doc.video_id")
    with pytest.raises(UsageError, match="unknown captions format 'lmms'"):
        read_captions(captions, caption_format="lmms")


# judged: capeval judge and a sweep --------------------------------------------------------------------------------

def _judge(tmp_path: Path, items: Path, captions: Path, fmt: str, *extra: str) -> pl.DataFrame:
    out = tmp_path / f"verdicts-{fmt}-{captions.suffix.lstrip('.')}.parquet"
    code = main(["judge", "--protocol", "capquiz", "--items", str(items), "--captions", str(captions),
                 "--captions-format", fmt, *extra, "--judge", "local", "--cache", str(tmp_path / "cache"),
                 "--out", str(out), "--resamples", "0", "--no-progress"])
    assert code == 0
    return pl.read_parquet(out)


def test_capeval_judge_reads_each_tools_output(tmp_path):
    items = _items(tmp_path)
    cases = [
        (lmms_eval_samples(tmp_path / "logs"), "lmms-eval", ("--captions-id-field", "doc.video_id"),
         "Qwen__Qwen2-VL-2B-Instruct"),
        (vlmevalkit_xlsx(tmp_path / "outputs"), "vlmevalkit", (), "InternVL2_5-8B"),
        (vlmevalkit_tsv(tmp_path / "tsv"), "vlmevalkit", (), "InternVL2_5-8B"),
        (inspect_json(tmp_path / "inspect"), "inspect", (), "openai/gpt-4o-mini"),
        (inspect_eval(tmp_path / "inspect-eval"), "inspect", (), "openai/gpt-4o-mini"),
    ]
    for captions, fmt, extra, label in cases:
        verdicts = _judge(tmp_path, items, captions, fmt, *extra)
        assert sorted(verdicts["item_id"]) == [f"{v}/q" for v in VIDEOS], captions
        assert verdicts["verdict"].null_count() == 0, captions
        assert set(verdicts["captioner"]) == {label}, captions
        # the local judge answers from the caption's count: each caption reached its own video's item
        assert verdicts.sort("item_id")["verdict"].to_list() == [1, 1, 1], (captions, verdicts.to_dicts())


def test_capeval_judge_names_the_file_and_row_of_a_bad_record(tmp_path, capsys):
    items, captions = _items(tmp_path), lmms_eval_samples(tmp_path / "logs")
    code = main(["judge", "--protocol", "capquiz", "--items", str(items), "--captions", str(captions),
                 "--captions-format", "lmms-eval", "--captions-id-field", "doc.video", "--judge", "local",
                 "--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "v.parquet"), "--no-progress"])
    assert code == 2
    assert f"{captions}: line 1: no 'doc.video' to name the video" in capsys.readouterr().err


def _sweep_file(tmp_path: Path, items: Path, entries: str) -> Path:
    path = tmp_path / "sweep.toml"
    path.write_text(f"""
name = "tools"
[[datasets]]
name = "quiz"
kind = "items"
path = "{items}"
{entries}
[[protocols]]
name = "capquiz"
[[judges]]
name = "local"
[options]
n_resamples = 0
""")
    return path


def test_a_sweep_judges_each_tools_output_under_its_model_label(tmp_path):
    items = _items(tmp_path)
    entries = f"""
[[captions]]
path = "{lmms_eval_samples(tmp_path / 'logs')}"
format = "lmms-eval"
id_field = "doc.video_id"
[[captions]]
path = "{vlmevalkit_xlsx(tmp_path / 'outputs')}"
format = "vlmevalkit"
[[captions]]
path = "{inspect_eval(tmp_path / 'inspect')}"
format = "inspect"
[[captions]]
path = "{inspect_json(tmp_path / 'inspect-json', model='anthropic/claude-3-5-haiku')}"
format = "inspect"
captioner = "haiku"
"""
    res = run_sweep(load_sweep(_sweep_file(tmp_path, items, entries)), tmp_path / "out", progress=False,
                    log=lambda m: None)
    assert res.exit_code == 0
    labels = {"Qwen__Qwen2-VL-2B-Instruct", "InternVL2_5-8B", "openai/gpt-4o-mini", "haiku"}
    assert set(res.results["captioner"]) == labels
    verdicts = pl.concat([pl.read_parquet(p) for p in (tmp_path / "out" / "verdicts").glob("*.parquet")])
    for label in labels:
        mine = verdicts.filter(pl.col("captioner") == label).sort("item_id")
        assert mine["item_id"].to_list() == [f"{v}/q" for v in VIDEOS], label
        assert mine["item_status"].to_list() == ["ok"] * 3 and mine["verdict"].to_list() == [1, 1, 1], label
    again = run_sweep(load_sweep(_sweep_file(tmp_path, items, entries)), tmp_path / "out", progress=False,
                      log=lambda m: None)
    assert again.cells_cached == again.cells_total == res.cells_total  # the same files and settings: nothing redone


def test_sweep_check_names_the_captions_entry_file_and_row(tmp_path):
    items = _items(tmp_path)
    rows = [{"index": 0, "video": "video/v0", "prediction": CAPTION["v0"]},
            {"index": 1, "video": None, "prediction": CAPTION["v1"]}]
    xlsx = vlmevalkit_xlsx(tmp_path / "outputs", rows)
    entries = f"""
[[captions]]
path = "{xlsx}"
format = "vlmevalkit"
[[captions]]
path = "{xlsx}"
format = "vlmevalkit-xlsx"
[[captions]]
path = "{xlsx}"
id_field = "index"
"""
    with pytest.raises(SweepFileError) as caught:
        load_sweep(_sweep_file(tmp_path, items, entries))
    text = str(caught.value)
    assert f"{xlsx}: sheet row 3: 'video' is null" in text
    assert "captions[1].format" in text and "unknown captions format 'vlmevalkit-xlsx'" in text
    assert "captions[2].id_field" in text


def test_id_field_changes_the_cell_key_and_no_format_keeps_the_old_one(tmp_path):
    from capeval.engine.sweep.grid import expand

    items = _items(tmp_path)
    captions = tmp_path / "captions.jsonl"
    captions.write_text("".join(json.dumps({"video_id": v, "caption": CAPTION[v]}) + "\n" for v in VIDEOS))
    inspect = inspect_json(tmp_path / "inspect")

    def key(entries: str) -> str:
        cell = expand(load_sweep(_sweep_file(tmp_path, items, entries)))[0]
        return cell.key(dataset_digest="d", captioner_revision="r", prompt_text="p", judge_revision="j",
                        source_digest="s")

    plain = key(f'[[captions]]\npath = "{captions}"\n')
    assert key(f'[[captions]]\npath = "{captions}"\nformat = "capeval"\n') == plain
    by_id = key(f'[[captions]]\npath = "{inspect}"\nformat = "inspect"\n')
    by_meta = key(f'[[captions]]\npath = "{inspect}"\nformat = "inspect"\nid_field = "metadata.video_id"\n')
    assert len({plain, by_id, by_meta}) == 3


def test_a_sweep_counts_a_record_without_text_as_a_caption_failure(tmp_path):
    items = _items(tmp_path)
    rows = [{"index": 0, "video": "video/v0", "prediction": CAPTION["v0"]},
            {"index": 1, "video": "video/v1", "prediction": "Failed to obtain answer via API."},
            {"index": 2, "video": "video/v2", "prediction": ""}]
    entries = f'[[captions]]\npath = "{vlmevalkit_xlsx(tmp_path / "outputs", rows)}"\nformat = "vlmevalkit"\n'
    res = run_sweep(load_sweep(_sweep_file(tmp_path, items, entries)), tmp_path / "out", progress=False,
                    log=lambda m: None)
    verdicts = pl.concat([pl.read_parquet(p) for p in (tmp_path / "out" / "verdicts").glob("*.parquet")])
    status = dict(zip(verdicts["item_id"], verdicts["item_status"]))
    errors = dict(zip(verdicts["item_id"], verdicts["error"]))
    assert status["v0/q"] == "ok" and verdicts.filter(pl.col("item_id") == "v0/q")["verdict"].to_list() == [1]
    assert "ok" not in (status["v1/q"], status["v2/q"])
    assert errors["v1/q"] == "caption failed: VLMEvalKit: Failed to obtain answer via API."
    assert errors["v2/q"].startswith("caption failed: ") and "xlsx: sheet row 4: the model's reply is empty" in errors[
        "v2/q"]
    assert res.exit_code == 3


def test_the_python_api_reads_a_tool_output_too(tmp_path):
    import capeval

    judged = capeval.judge("capquiz", _items(tmp_path), inspect_json(tmp_path / "inspect"), judge="local",
                           cache=tmp_path / "cache", n_resamples=0, captions_format="inspect",
                           captions_id_field="metadata.video_id")
    assert judged.verdicts.sort("item_id")["verdict"].to_list() == [1, 1, 1]
    assert set(judged.verdicts["captioner"]) == {"openai/gpt-4o-mini"}
