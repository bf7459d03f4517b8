"""Captions from the output files of the evaluation tools people already run (docs/inputs.md, "Captions from other
tools"): lmms-eval's `--log_samples` JSONL, VLMEvalKit's prediction `.xlsx` / `.tsv` and inspect_ai's eval logs
(`.json`, and the zipped `.eval`). Each reader turns the tool's records into caption rows with capeval's columns
(`video_id`, `caption`, `error`), numbered as a person finds them in the file (the JSONL line, the sheet or TSV row,
the log's 1-based sample), so every later check names the file and that row.

How a record names its video (`id_field`, a dotted path into the record; default per tool, `DEFAULT_ID_FIELDS`):
lmms-eval's `doc_id` is the row of the task's dataset, so a dataset's own id is usually `doc.<field>` (kept when the
tool logged `doc`); VLMEvalKit's `video` column names the video file (`video/<id>`, matched to the items' media
files); inspect_ai's sample `id` is what the task's dataset gave it (`metadata.<field>` for another). The captioner
label is the model: the folder lmms-eval and VLMEvalKit write a model's files into, inspect_ai's `eval.model`.

A record whose model gave no text (an empty reply, VLMEvalKit's failure message, an inspect_ai sample error) is a
caption row with an `error`, counted as a caption failure like a captioner's own; a record that cannot be read (no
id, a reply that is not text, a missing column) is a UsageError naming the file and the row."""

from __future__ import annotations

import json
import re
import zipfile
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

from capeval.engine.errors import UsageError
from capeval.engine.inputs.rows import is_missing, read_rows, warn

#: the `format` values of `[[captions]]` and `capeval judge --captions-format`; "capeval" is capeval's own table
CAPTION_FORMATS = ("capeval", "lmms-eval", "vlmevalkit", "inspect")
DEFAULT_ID_FIELDS = {"lmms-eval": "doc_id", "vlmevalkit": "video", "inspect": "id"}

#: what VLMEvalKit stores as the prediction of a sample its API model failed on (vlmeval/inference*.py FAIL_MSG)
VLMEVALKIT_FAILURE = "Failed to obtain answer via API."
#: VLMEvalKit's run folder inside a model's folder (`<work_dir>/<model>/T<date>_G<commit>/`)
_VLMEVALKIT_RUN_FOLDER = re.compile(r"^T\d{8}_G")


def tool_caption_rows(path: Path, fmt: str, id_field: str | None = None, *,
                      keep_empty: bool = False) -> Iterator[tuple[int, dict]]:
    """(row number, caption record with capeval's CAPTIONS columns) for every record of the tool output `path`.
    An empty reply is a caption failure, unless `keep_empty` (a protocol whose official script judges an empty
    caption as the text it is; JudgeProtocol.caption_file_rules)."""
    field = id_field or DEFAULT_ID_FIELDS[fmt]
    if not path.is_file():
        raise UsageError(f"{path}: no such file" + (" (a folder: name a file in it)" if path.is_dir() else ""))
    readers = {"lmms-eval": _lmms_eval, "vlmevalkit": _vlmevalkit, "inspect": _inspect}
    if fmt not in readers:
        raise UsageError(f"{path}: unknown captions format {fmt!r} (one of {', '.join(CAPTION_FORMATS)})")
    for n, at, rec in readers[fmt](path, field):
        text = rec["caption"]
        if rec["error"] is None and (text is None or not text.strip()) and not (keep_empty and text is not None):
            rec = {**rec, "caption": None, "error": f"{at}: the model's reply is empty"}
        yield n, rec


def tool_captioner_label(path: str | Path, fmt: str) -> str:
    """The captioner label of a tool's output file: the model it names (see the module docstring)."""
    path = Path(path)
    if fmt == "inspect":
        return _inspect_model(path, path.stat().st_mtime_ns if path.is_file() else 0)
    folder = path.resolve().parent
    if fmt == "vlmevalkit" and _VLMEVALKIT_RUN_FOLDER.match(folder.name):
        folder = folder.parent
    return folder.name or path.stem


def format_problem(fmt: str | None, id_field: str | None) -> tuple[str, str] | None:
    """(the setting, why) when this format / id_field pair is refused; None when it is fine."""
    if fmt is not None and fmt not in CAPTION_FORMATS:
        return "format", f"unknown captions format {fmt!r} (one of {', '.join(CAPTION_FORMATS)})"
    if id_field is not None and fmt in (None, "capeval"):
        return "id_field", "applies to another tool's output only (format lmms-eval, vlmevalkit or inspect)"
    if id_field is not None and not id_field.strip(". "):
        return "id_field", "empty"
    return None


def _field(record: dict, dotted: str) -> tuple[bool, Any]:
    """(found, value) of the dotted path `dotted` in `record` (`doc.video_name`, `metadata.video_id`)."""
    value: Any = record
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            return False, None
        value = value[part]
    return True, value


def _video_id(record: dict, field: str, at: str, hint: str) -> str:
    found, value = _field(record, field)
    if not found:
        keys = ", ".join(sorted(record)[:12])
        raise UsageError(f"{at}: no {field!r} to name the video (have {keys}); {hint}")
    if isinstance(value, bool) or is_missing(value) or not isinstance(value, (str, int, float)):
        raise UsageError(f"{at}: {field!r} is {json.dumps(value, default=str)[:60]}, not an id (text or integer)")
    if isinstance(value, float):
        if not value.is_integer():
            raise UsageError(f"{at}: {field!r} is the number {value}, not an id")
        value = int(value)
    text = str(value).strip()
    if not text:
        raise UsageError(f"{at}: {field!r} is empty")
    return text


def _row(video_id: str, text: str | None, error: str | None) -> dict:
    return {"video_id": video_id, "caption": text, "error": error}


# lmms-eval ------------------------------------------------------------------------------------------------------

_LMMS_HINT = ("lmms-eval's doc_id is the row of the task's dataset: name the field of `doc` that holds your items' "
              "id with id_field (e.g. \"doc.video_id\"), or give items whose ids are those rows")


def _lmms_eval(path: Path, field: str) -> Iterator[tuple[int, str, dict]]:
    """`<output_path>/<model>/<date>_samples_<task>.jsonl`: one JSON object per line with doc_id, target, the
    model's `resps` and `filtered_resps` (one entry per request of the doc), and the task's metrics."""
    if path.suffix.lower() not in (".jsonl", ".json"):
        raise UsageError(f"{path}: lmms-eval writes its samples as JSONL "
                         f"(`--log_samples`: <date>_samples_<task>.jsonl)")
    for line, rec in read_rows(path):
        at = f"{path}: line {line}"
        vid = _video_id(rec, field, at, _LMMS_HINT)
        for name in ("filtered_resps", "resps"):
            if name in rec:
                text = _lmms_text(rec[name], f"{at}, field {name!r}")
                break
        else:
            raise UsageError(f"{at}: no `filtered_resps` or `resps` (have {', '.join(sorted(rec)[:12])}); is this "
                             f"an lmms-eval samples file?")
        yield line, at, _row(vid, text, None)


def _lmms_text(value: Any, at: str) -> str | None:
    """The reply text of a doc: its first request's response, unwrapped from the lists lmms-eval nests it in."""
    while isinstance(value, list):
        if len(value) > 1:
            raise UsageError(f"{at}: {len(value)} responses for one doc; a caption task sends one request per doc")
        if not value:
            return None
        value = value[0]
    if value is None:
        return None
    if not isinstance(value, str):
        raise UsageError(f"{at}: the response is {type(value).__name__}, not text")
    return value


# VLMEvalKit -----------------------------------------------------------------------------------------------------

def _vlmevalkit(path: Path, field: str) -> Iterator[tuple[int, str, dict]]:
    """`<work_dir>/<model>/<model>_<dataset>*.xlsx` (or .tsv / .csv): the dataset's TSV columns (index, video,
    question, answer, ...) with the model's `prediction` added; one row per sample, the header in row 1."""
    suffix = path.suffix.lower()
    if suffix == ".xlsx":
        rows, what = _xlsx_rows(path), "sheet row"
    elif suffix in (".tsv", ".csv"):
        rows, what = read_rows(path), "line"
    else:
        raise UsageError(f"{path}: VLMEvalKit's predictions are .xlsx, .tsv or .csv files, not {path.suffix!r}")
    for n, rec in rows:
        at = f"{path}: {what} {n}"
        if "prediction" not in rec:
            raise UsageError(f"{at}: no `prediction` column (have {', '.join(sorted(map(str, rec))[:12])}); is "
                             f"this a VLMEvalKit prediction file?")
        vid = _video_id(rec, field, at, "name the column that holds your items' id with id_field (e.g. \"index\")")
        pred = rec["prediction"]
        if is_missing(pred):
            yield n, at, _row(vid, None, None)
            continue
        if isinstance(pred, bool) or not isinstance(pred, (str, int, float)):
            raise UsageError(f"{at}, column 'prediction': {type(pred).__name__}, not text")
        text = str(pred)
        yield n, at, _row(vid, None if text == VLMEVALKIT_FAILURE else text,
                      "VLMEvalKit: " + VLMEVALKIT_FAILURE if text == VLMEVALKIT_FAILURE else None)


def _xlsx_rows(path: Path) -> Iterator[tuple[int, dict]]:
    """(sheet row, record) of the first sheet of `path`; row 1 is the header, as VLMEvalKit writes it."""
    try:
        import openpyxl  # deferred: optional extra
    except ImportError:
        raise UsageError(f"{path}: reading .xlsx needs openpyxl, an optional extra of capeval: "
                         f"pip install 'capeval[xlsx]' (or give VLMEvalKit's .tsv)") from None
    try:
        book = openpyxl.load_workbook(path, read_only=True, data_only=True)
    except Exception as exc:  # noqa: BLE001 - openpyxl raises several types for a file that is not a workbook
        raise UsageError(f"{path}: not a readable .xlsx workbook ({type(exc).__name__}: {exc})") from None
    try:
        sheet = book.worksheets[0]
        rows = sheet.iter_rows(values_only=True)
        header = next(rows, None)
        if header is None:
            return
        names = [None if h is None else str(h) for h in header]
        for n, values in enumerate(rows, 2):
            if all(v is None for v in values):
                continue
            yield n, {name: value for name, value in zip(names, values) if name is not None}
    finally:
        book.close()


# inspect_ai -----------------------------------------------------------------------------------------------------

def _inspect(path: Path, field: str) -> Iterator[tuple[int, str, dict]]:
    """An EvalLog: `eval` (the task, `model`, ...) and `samples`, each with `id`, `epoch`, `input`, `target`,
    `output` (`completion`, `choices[].message.content`), `metadata` and, when it failed, `error`. A `.json` log
    holds them in one object; a `.eval` log is a zip with `header.json` and one `samples/<id>_epoch_<n>.json` each.
    Samples of epochs after the first are not read (one caption per video), with a warning saying how many."""
    later = 0
    for n, sample in _inspect_samples(path):
        at = f"{path}: sample {n}"
        if not isinstance(sample, dict):
            raise UsageError(f"{at}: expected an object, got {type(sample).__name__}")
        if sample.get("epoch", 1) not in (1, None):
            later += 1
            continue
        vid = _video_id(sample, field, at, "name the sample field that holds your items' id with id_field "
                                           "(e.g. \"metadata.video_id\")")
        at = f"{at} (id {vid!r})"
        error = sample.get("error")
        if error:
            message = error.get("message") if isinstance(error, dict) else str(error)
            yield n, at, _row(vid, None, f"inspect_ai: {message or 'sample error'}")
            continue
        yield n, at, _row(vid, _inspect_text(sample.get("output"), at), None)
    if later:
        warn(f"{path}: read the first epoch only; {later} sample(s) of later epochs were not read")


def _inspect_samples(path: Path) -> Iterator[tuple[int, Any]]:
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            members = sorted((m for m in archive.namelist() if m.startswith("samples/") and m.endswith(".json")),
                             key=_member_order)
            for n, member in enumerate(members, 1):
                try:
                    yield n, json.loads(archive.read(member))
                except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                    raise UsageError(f"{path}: sample {n} ({member}): malformed JSON ({exc})") from None
        return
    log = _inspect_log(path)
    samples = log.get("samples")
    if not isinstance(samples, list):
        raise UsageError(f"{path}: no `samples` list in this inspect_ai log (a log written with --no-log-samples, or "
                         f"not an EvalLog)")
    yield from enumerate(samples, 1)


def _member_order(member: str) -> tuple:
    """Samples in their ids' order (numeric ids as numbers), then by epoch."""
    stem = member.removeprefix("samples/").removesuffix(".json")
    sid, _, epoch = stem.rpartition("_epoch_")
    return (0, int(sid), "") if sid.isdigit() else (1, 0, sid), int(epoch) if epoch.isdigit() else 0


def _inspect_log(path: Path) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            log = json.load(f)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}:{exc.lineno}: malformed JSON ({exc.msg}); inspect_ai logs are one JSON object "
                         f"(--log-format json) or a .eval zip") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not UTF-8 text") from None
    if not isinstance(log, dict) or "eval" not in log:
        raise UsageError(f"{path}: not an inspect_ai eval log (no `eval` object)")
    return log


def _inspect_text(output: Any, at: str) -> str | None:
    """`output.completion`, else the text parts of the first choice's message."""
    if output is None:
        return None
    if not isinstance(output, dict):
        raise UsageError(f"{at}, field 'output': {type(output).__name__}, not a model output object")
    completion = output.get("completion")
    if isinstance(completion, str) and completion.strip():
        return completion
    if completion is not None and not isinstance(completion, str):
        raise UsageError(f"{at}, field 'output.completion': {type(completion).__name__}, not text")
    choices = output.get("choices") or []
    if not choices:
        return completion
    content = (choices[0].get("message") or {}).get("content") if isinstance(choices[0], dict) else None
    if isinstance(content, str) or content is None:
        return content
    if isinstance(content, list):  # content parts: the text ones (reasoning parts are not the caption)
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    raise UsageError(f"{at}, field 'output.choices[0].message.content': {type(content).__name__}, not text")


@lru_cache(maxsize=64)
def _inspect_model(path: Path, mtime_ns: int) -> str:
    """`eval.model` of an inspect_ai log (the header of a .eval zip); cached by the file's modification time."""
    del mtime_ns  # a key of the cache only: a rewritten log is read again
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            try:
                log = json.loads(archive.read("header.json"))
            except (KeyError, json.JSONDecodeError) as exc:
                raise UsageError(f"{path}: no readable header.json in this .eval log ({exc})") from None
    else:
        log = _inspect_log(path)
    model = log.get("eval", {}).get("model") if isinstance(log.get("eval"), dict) else None
    if not isinstance(model, str) or not model.strip():
        raise UsageError(f"{path}: the log's eval.model is missing; give the captioner label yourself")
    return model
