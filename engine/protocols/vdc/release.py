"""VDC's question sets as AuroraCap released them (rese1f/aurora `post_eval/<kind>.jsonl`) -> ITEMS rows.

One file per caption kind (short, detailed, background, main_object, camera); each line is a JSON object mapping a
video id to that video's QA list, `[{"question": ..., "answer": ..., "category": ...}, ...]`. The official
`process_vdc_result.py` reads a file with `tp_gt_qa_dict.update(json.loads(line))` per line, so when an id appears
on several lines the LAST line's list is the one judged; capeval does the same and reports the lines it replaced (a
warning naming them; the released main_object.jsonl has four such ids, two of them with different questions), never
merging the lists. An id keeps the position of its first line (as `dict.update` keeps a key's place).

One ITEMS row per QA pair: benchmark "vdc", task = the kind, video_id = the VDC video id, item_id =
"<kind>/<video_id>/<n:02d>" (n = the pair's 0-based position in the video's QA list), annotation = question,
answer = reference answer, category = the pair's category (unused by the official metric), extra = JSON
{"qa_index": n, "n_questions": len(list), "line": 1-based line of the list judged} plus "replaced_lines" when
that id had earlier lines."""

from __future__ import annotations

import json
from dataclasses import dataclass, field as dataclass_field
from pathlib import Path

import pyarrow as pa

from capeval.engine import schemas
from capeval.engine.datasets.jsonl import DatasetFormatError, field, read_jsonl
from capeval.engine.inputs.rows import warn

BENCHMARK = "vdc"
#: the five caption kinds, each with its own QA file `<kind>.jsonl`, in the order the official README lists them
KINDS = ("short", "detailed", "background", "main_object", "camera")


@dataclass(frozen=True)
class QAPair:
    question: str
    answer: str
    category: str


@dataclass
class VideoQuestions:
    """One video's QA list as judged: the list of the last line naming the video (`line`, 1-based) and the lines it
    replaced."""

    line: int
    pairs: list[QAPair]
    replaced_lines: list[int] = dataclass_field(default_factory=list)


@dataclass
class QAFile:
    """A kind's QA file as read: the videos in first-seen order, and how many pairs its lines hold in all (counting
    the replaced lists too)."""

    path: Path
    kind: str
    videos: dict[str, VideoQuestions]
    n_pairs_read: int

    @property
    def duplicates(self) -> dict[str, list[int]]:
        """video id -> every 1-based line naming it, for the ids named on several lines."""
        return {vid: [*v.replaced_lines, v.line] for vid, v in self.videos.items() if v.replaced_lines}


def kinds_problem(kinds: list | tuple) -> str | None:
    """What is wrong with a `kinds` value (a list of kind names), or None."""
    if not all(isinstance(k, str) for k in kinds):
        return "expected a list of kind names"
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        return f"unknown kind(s) {', '.join(map(repr, unknown))} (choose from {', '.join(KINDS)})"
    return None if kinds else "empty list: name at least one kind, or leave `kinds` out for all five"


def kind_of_file(path: str | Path) -> str | None:
    """The kind a QA file's name says (`<kind>.jsonl`), or None."""
    path = Path(path)
    return path.stem if path.suffix == ".jsonl" and path.stem in KINDS else None


def kind_files(folder: str | Path, kinds: tuple[str, ...] | list[str] | None = None) -> list[Path]:
    """The QA files of `kinds` (default: all five) present in `folder`, in KINDS order."""
    wanted = KINDS if kinds is None else tuple(k for k in KINDS if k in kinds)
    return [p for k in wanted if (p := Path(folder) / f"{k}.jsonl").is_file()]


def is_release_file(path: str | Path) -> bool:
    """A path in VDC's release layout: a `<kind>.jsonl` file, or a folder holding at least one."""
    path = Path(path)
    return bool(kind_files(path)) if path.is_dir() else kind_of_file(path) is not None


def _pair(qa, path: Path, line: int, where: str) -> QAPair:
    if not isinstance(qa, dict):
        raise DatasetFormatError(path, line, f"expected an object, got {type(qa).__name__}", field=where)
    try:
        question = field(qa, "question", str, path, line)
        # formatted into the judge prompt as written (str.format): a number is its text
        answer = field(qa, "answer", (str, int, float), path, line)
        category = field(qa, "category", str, path, line, optional=True)
    except DatasetFormatError as exc:
        raise DatasetFormatError(path, line, exc.args[0].split(": ", 1)[-1], field=f"{where}.{exc.field}") from None
    return QAPair(question, str(answer), category or "")


def read_qa_file(path: str | Path, kind: str) -> QAFile:
    """Every line of one kind's QA file, checked; errors name the file, the line and the field."""
    path = Path(path)
    if kind not in KINDS:
        raise ValueError(f"unknown VDC kind {kind!r} (choose from {', '.join(KINDS)})")
    videos: dict[str, VideoQuestions] = {}
    n_pairs = 0
    for line, record in read_jsonl(path):
        if not record:
            raise DatasetFormatError(path, line, "expected an object mapping a video id to its QA list, got {}")
        for video_id, qa_list in record.items():
            if not video_id.strip():
                raise DatasetFormatError(path, line, "empty video id")
            if not isinstance(qa_list, list):
                raise DatasetFormatError(path, line, f"expected the video's QA list (an array), got "
                                         f"{type(qa_list).__name__}", field=video_id)
            pairs = [_pair(qa, path, line, f"{video_id}[{n}]") for n, qa in enumerate(qa_list)]
            n_pairs += len(pairs)
            earlier = videos.get(video_id)
            if earlier is None:
                videos[video_id] = VideoQuestions(line, pairs)
            else:  # dict.update: the later list replaces the earlier one, the id keeps its place
                videos[video_id] = VideoQuestions(line, pairs, [*earlier.replaced_lines, earlier.line])
    return QAFile(path, kind, videos, n_pairs)


def _warn_duplicates(qa: QAFile) -> None:
    dups = qa.duplicates
    if not dups:
        return
    parts = []
    for vid, lines in dups.items():
        same = all(qa.videos[vid].pairs == _pairs_on_line(qa.path, line, vid) for line in lines[:-1])
        parts.append(f"{vid} on lines {', '.join(map(str, lines))} ({'same' if same else 'different'} questions)")
    warn(f"{qa.path}: {len(dups)} video id(s) on several lines; the last line's questions are judged, as the "
         f"official script's dict.update keeps them: " + "; ".join(parts))


def _pairs_on_line(path: Path, line: int, video_id: str) -> list[QAPair]:
    with open(path, encoding="utf-8") as f:
        for lineno, text in enumerate(f, 1):
            if lineno == line:
                return [_pair(qa, path, line, f"{video_id}[{n}]") for n, qa in enumerate(json.loads(text)[video_id])]
    return []


def qa_items(qa: QAFile) -> pa.Table:
    """ITEMS rows of one kind's QA file as read (see the module docstring)."""
    rows: dict[str, list] = {k: [] for k in ("item_id", "video_id", "annotation", "answer", "category", "extra")}
    for video_id, video in qa.videos.items():
        n_questions = len(video.pairs)
        for n, pair in enumerate(video.pairs):
            extra = {"qa_index": n, "n_questions": n_questions, "line": video.line}
            if video.replaced_lines:
                extra["replaced_lines"] = video.replaced_lines
            for k, v in zip(rows, (f"{qa.kind}/{video_id}/{n:02d}", video_id, pair.question, pair.answer,
                                   pair.category, json.dumps(extra))):
                rows[k].append(v)
    n = len(rows["item_id"])
    table = pa.table({"benchmark": [BENCHMARK] * n, "task": [qa.kind] * n, "media_type": ["video"] * n, **rows})
    return schemas.conform(table, schemas.ITEMS)


def _warn_empty(qa: QAFile) -> None:
    empty = [vid for vid, v in qa.videos.items() if not v.pairs]
    if empty:
        warn(f"{qa.path}: {len(empty)} video id(s) with an empty QA list give no items (the official script skips "
             f"such a video on a ZeroDivisionError): {', '.join(empty[:5])}" + (" ..." if len(empty) > 5 else ""))


def load_qa_file(path: str | Path, kind: str) -> pa.Table:
    """ITEMS of one kind's QA file, warning about the ids on several lines and the empty QA lists."""
    qa = read_qa_file(path, kind)
    _warn_duplicates(qa)
    _warn_empty(qa)
    return qa_items(qa)


def resolve_kinds(path: str | Path, kinds: list[str] | tuple[str, ...] | None) -> list[tuple[Path, str]]:
    """(file, kind) pairs a `path` (one QA file or a folder of them) and optional `kinds` select; a ValueError says
    what is wrong. A file's kind is its name's (`<kind>.jsonl`) or, for another name, the one kind `kinds` names.
    A folder gives its `<kind>.jsonl` files (of `kinds` when given; each must be there)."""
    path = Path(path)
    if kinds is not None and (problem := kinds_problem(kinds)):
        raise ValueError(f"kinds: {problem}")
    if path.is_dir():
        files = kind_files(path, kinds)
        missing = [k for k in (kinds or ()) if not (path / f"{k}.jsonl").is_file()]
        if missing:
            raise ValueError(f"{path}: no {', '.join(f'{k}.jsonl' for k in missing)}")
        if not files:
            raise ValueError(f"{path}: no VDC QA file ({', '.join(f'{k}.jsonl' for k in KINDS)})")
        return [(p, p.stem) for p in files]
    named = kind_of_file(path)
    if named is not None:
        if kinds is not None and list(kinds) != [named]:
            raise ValueError(f"{path.name} holds the {named!r} questions; `kinds` {list(kinds)} names other kinds "
                             f"(leave it out, or give the folder)")
        return [(path, named)]
    if kinds is None or len(kinds) != 1:
        raise ValueError(f"{path.name}: the file's name is not a kind's ({', '.join(f'{k}.jsonl' for k in KINDS)}); "
                         f"say which kind its questions are with `kinds = [\"<kind>\"]`")
    return [(path, kinds[0])]


def load_vdc(path: str | Path, kinds: list[str] | tuple[str, ...] | None = None) -> pa.Table:
    """ITEMS of the QA files `resolve_kinds` selects, kind after kind in KINDS order. A folder of several kinds also
    warns about the video ids a kind's file lacks while another selected kind has them (those videos' captions of
    that kind are never scored, as officially)."""
    selected = resolve_kinds(path, kinds)
    files = [read_qa_file(p, kind) for p, kind in selected]
    for qa in files:
        _warn_duplicates(qa)
        _warn_empty(qa)
    if len(files) > 1:
        every = dict.fromkeys(vid for qa in files for vid in qa.videos)
        for qa in files:
            lacking = [vid for vid in every if vid not in qa.videos]
            if lacking:
                warn(f"{qa.path}: {len(lacking)} video id(s) of the other kinds have no {qa.kind} questions (their "
                     f"{qa.kind} captions are not scored): {', '.join(lacking[:5])}" + (" ..." if len(lacking) > 5 else ""))
    tables = [qa_items(qa) for qa in files]
    return pa.concat_tables(tables) if tables else schemas.ITEMS.empty_table()
