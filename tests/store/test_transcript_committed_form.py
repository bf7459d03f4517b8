"""A cell with no corrections at its end writes its transcript rows in their committed form as they are judged
(`TranscriptSpool(commit_as=CommitForm(...))`): the committed file is the temp file written during the run, renamed
into place, not a second pass over the spool; and it is the same file, byte for byte, as the spool-then-rewrite
path gives for the same rows."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from capeval.engine.store.transcripts import CAPTURE, TRANSCRIPTS, CommitForm, TranscriptSpool

CAPTIONS = {f"c{v}": f"caption of video {v}: a dog runs after a ball" for v in range(40)}


def _chunk(start: int, n: int) -> pa.Table:
    rows = []
    for i in range(start, start + n):
        row = {name: None for name in CAPTURE.names}
        row.update(request_key=f"k{i}", protocol="capquiz", item_id=f"v{i % 40}/q{i}", video_id=f"v{i % 40}",
                   caption_key=f"c{i % 40}", step="answer", sub_index=0, trial=0, user=f"question {i} about it",
                   verdict=i % 2, parse_status=0, attempts=[{"attempt": 0, "source": "sent", "reply": "A",
                                                             "latency_s": 0.25}], _depth=0, _order=i)
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=CAPTURE)


def _judged(spool: TranscriptSpool, chunks: list[pa.Table]) -> None:
    for chunk in chunks:
        spool.append(chunk)
    spool.finish()


def test_the_committed_form_is_the_rewritten_file_byte_for_byte(tmp_path):
    chunks = [_chunk(0, 300), _chunk(300, 300), _chunk(600, 300), _chunk(900, 50)]
    rewritten = TranscriptSpool(tmp_path / "a", "cell")
    _judged(rewritten, chunks)
    a = rewritten.commit(captions=CAPTIONS, cell_key="cell")

    direct = TranscriptSpool(tmp_path / "b", "cell", commit_as=CommitForm(dict(CAPTIONS), "cell"))
    _judged(direct, chunks)
    b = direct.commit()

    assert a.read_bytes() == b.read_bytes()
    table = pq.read_table(b)
    assert table.schema == TRANSCRIPTS and table.num_rows == 950
    assert pq.ParquetFile(b).num_row_groups == 4  # a chunk is a row group, as in the rewritten file
    assert table.column("caption").to_pylist()[:2] == [CAPTIONS["c0"], CAPTIONS["c1"]]
    assert set(table.column("cell_key").to_pylist()) == {"cell"}
    assert [p.name for p in (tmp_path / "b").iterdir()] == ["cell.parquet"]  # the temp file went into place


def test_the_committed_file_is_the_temp_file_renamed_not_written_again(tmp_path):
    direct = TranscriptSpool(tmp_path, "cell", commit_as=CommitForm(dict(CAPTIONS), "cell"))
    _judged(direct, [_chunk(0, 100), _chunk(100, 100), _chunk(200, 100)])  # the third waits for the first's write
    temp = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert len(temp) == 1
    inode = os.stat(temp[0]).st_ino
    path = direct.commit()
    assert os.stat(path).st_ino == inode

    spooled = TranscriptSpool(tmp_path / "s", "cell")  # the spool is rewritten into a new file
    _judged(spooled, [_chunk(0, 100)])  # finish waits for the spool's writes
    spool_inode = os.stat(next((tmp_path / "s").glob("*.tmp"))).st_ino
    assert os.stat(spooled.commit(captions=CAPTIONS, cell_key="cell")).st_ino != spool_inode


def test_a_caption_added_while_the_cell_runs_is_in_the_rows_written_after_it(tmp_path):
    texts: dict = {}
    direct = TranscriptSpool(tmp_path, "cell", commit_as=CommitForm(texts, "cell"))
    texts.update({k: v for k, v in CAPTIONS.items() if int(k[1:]) < 20})
    direct.append(_chunk(0, 20))  # videos 0-19
    texts.update(CAPTIONS)
    direct.append(_chunk(20, 20))  # videos 20-39
    direct.finish()
    table = pq.read_table(direct.commit())
    assert table.column("caption").to_pylist() == [CAPTIONS[f"c{i}"] for i in range(40)]


def test_no_rows_commit_the_same_empty_file(tmp_path):
    rewritten = TranscriptSpool(tmp_path / "a", "cell")
    rewritten.finish()
    direct = TranscriptSpool(tmp_path / "b", "cell", commit_as=CommitForm({}, "cell"))
    direct.finish()
    a, b = rewritten.commit(cell_key="cell"), direct.commit()
    assert pq.read_table(b).num_rows == 0 and pq.read_table(b).schema == TRANSCRIPTS
    assert a.read_bytes() == b.read_bytes()


def test_rows_in_committed_form_cannot_be_corrected(tmp_path):
    direct = TranscriptSpool(tmp_path, "cell", commit_as=CommitForm(dict(CAPTIONS), "cell"))
    direct.append(_chunk(0, 10))
    with pytest.raises(ValueError, match="cannot be corrected"):
        direct.finish(lambda t: t)
    direct.discard()
    assert list(tmp_path.iterdir()) == []


def test_an_abandoned_commit_leaves_nothing(tmp_path):
    direct = TranscriptSpool(tmp_path, "cell", commit_as=CommitForm(dict(CAPTIONS), "cell"))
    _judged(direct, [_chunk(0, 10)])
    direct.commit_later().abandon()
    direct.discard()
    assert list(tmp_path.iterdir()) == []
