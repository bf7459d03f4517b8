"""A cell with no corrections at its end writes its transcript rows in their committed form as they are judged
(`TranscriptSpool(commit_as=CommitForm(...))`): the committed file is the temp file written during the run, renamed
into place, not a second pass over the spool; and it is the same file, byte for byte, as the spool-then-rewrite
path gives for the same rows."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from capeval.engine.store.transcripts import CAPTURE, TRANSCRIPTS, CaptionTexts, CommitForm, TranscriptSpool

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


def _table(texts: dict) -> pa.Table:
    return pa.table({"caption_key": pa.array(list(texts), pa.string()), "text": pa.array(list(texts.values()))})


def _judged(spool: TranscriptSpool, chunks: list[pa.Table]) -> None:
    for chunk in chunks:
        spool.append(chunk)
    spool.finish()


def test_the_committed_form_is_the_rewritten_file_byte_for_byte(tmp_path):
    chunks = [_chunk(0, 300), _chunk(300, 300), _chunk(600, 300), _chunk(900, 50)]
    rewritten = TranscriptSpool(tmp_path / "a", "cell")
    _judged(rewritten, chunks)
    a = rewritten.commit(captions=CaptionTexts.of(CAPTIONS), cell_key="cell")

    direct = TranscriptSpool(tmp_path / "b", "cell", commit_as=CommitForm(CaptionTexts.of(CAPTIONS), "cell"))
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
    direct = TranscriptSpool(tmp_path, "cell", commit_as=CommitForm(CaptionTexts.of(CAPTIONS), "cell"))
    _judged(direct, [_chunk(0, 100), _chunk(100, 100), _chunk(200, 100)])  # the third waits for the first's write
    temp = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert len(temp) == 1
    inode = os.stat(temp[0]).st_ino
    path = direct.commit()
    assert os.stat(path).st_ino == inode

    spooled = TranscriptSpool(tmp_path / "s", "cell")  # the spool is rewritten into a new file
    _judged(spooled, [_chunk(0, 100)])  # finish waits for the spool's writes
    spool_inode = os.stat(next((tmp_path / "s").glob("*.tmp"))).st_ino
    assert os.stat(spooled.commit(captions=CaptionTexts.of(CAPTIONS), cell_key="cell")).st_ino != spool_inode


def test_a_caption_added_while_the_cell_runs_is_in_the_rows_written_after_it(tmp_path):
    texts = CaptionTexts()
    direct = TranscriptSpool(tmp_path, "cell", commit_as=CommitForm(texts, "cell"))
    texts.add(_table({k: v for k, v in CAPTIONS.items() if int(k[1:]) < 20}))
    direct.append(_chunk(0, 20))  # videos 0-19
    texts.add(_table(CAPTIONS))  # 0-19 again: a key added twice keeps its first text
    direct.append(_chunk(20, 20))  # videos 20-39
    direct.finish()
    table = pq.read_table(direct.commit())
    assert table.column("caption").to_pylist() == [CAPTIONS[f"c{i}"] for i in range(40)]


def test_no_rows_commit_the_same_empty_file(tmp_path):
    rewritten = TranscriptSpool(tmp_path / "a", "cell")
    rewritten.finish()
    direct = TranscriptSpool(tmp_path / "b", "cell", commit_as=CommitForm(CaptionTexts(), "cell"))
    direct.finish()
    a, b = rewritten.commit(cell_key="cell"), direct.commit()
    assert pq.read_table(b).num_rows == 0 and pq.read_table(b).schema == TRANSCRIPTS
    assert a.read_bytes() == b.read_bytes()


def test_rows_in_committed_form_cannot_be_corrected(tmp_path):
    direct = TranscriptSpool(tmp_path, "cell", commit_as=CommitForm(CaptionTexts.of(CAPTIONS), "cell"))
    direct.append(_chunk(0, 10))
    with pytest.raises(ValueError, match="cannot be corrected"):
        direct.finish(lambda t: t)
    direct.discard()
    assert list(tmp_path.iterdir()) == []


def test_an_abandoned_commit_leaves_nothing(tmp_path):
    direct = TranscriptSpool(tmp_path, "cell", commit_as=CommitForm(CaptionTexts.of(CAPTIONS), "cell"))
    _judged(direct, [_chunk(0, 10)])
    direct.commit_later().abandon()
    direct.discard()
    assert list(tmp_path.iterdir()) == []


def test_caption_texts_look_up_every_piece_added_first_text_wins_and_null_or_unknown_keys_give_null():
    texts = CaptionTexts()
    assert texts.texts_of(pa.array(["c1"])).to_pylist() == [None]
    texts.add(_table({"c1": "one", "c2": None}))
    texts.add(pa.concat_tables([_table({"c1": "other", "c3": "three"}), _table({"c4": "four"})]))  # two chunks
    keys = pa.chunked_array([pa.array(["c3", None]), pa.array(["c1", "c9", "c2", "c4"])])
    assert texts.texts_of(keys).to_pylist() == ["three", None, "one", None, None, "four"]
    assert texts.texts_of(pa.array([], pa.string())).to_pylist() == []
