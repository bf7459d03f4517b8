"""Every key and revision is derived in capeval.engine.keys, and each keeps the exact text it had before it moved
there: run folders and judge caches made earlier must still hit. The expected values below were computed by the
code these functions replaced."""

from capeval.engine.judging.requests import attempt_key
from capeval.engine.keys import (caption_group_tags, caption_key, construct_tag, frames_key, mode_tag, pack_tag,
                                 packs_tag, protocol_tag, request_key, tagged_revision)


def test_revisions_keep_their_text():
    assert tagged_revision("gpt", protocol_tag("capquiz", "1")) == "gpt|capquiz@1"
    assert tagged_revision("gpt", pack_tag("abc"), mode_tag("strict")) == "gpt|pack:abc|mode:strict"
    assert tagged_revision("gpt", protocol_tag("p", "2"), *caption_group_tags("cap", "short", "uniform:8")) == \
        "gpt|p@2|cap|short|uniform:8"
    assert tagged_revision("", packs_tag(["d1", None]), mode_tag("official")) == "|packs:d1,-|mode:official"
    assert tagged_revision("j", construct_tag("pipe", "step", "3"), pack_tag("d"), mode_tag("strict")) == \
        "j|construct:pipe/step@3|pack:d|mode:strict"


def test_request_keys_are_unchanged():
    assert request_key("j", "r|p@1", system="s", user="u", images_digest=None, choices=["A", "B"], json_schema=None,
                       max_tokens=16, temperature=0.0, seed=3) == "bbef967a728622351fce108bada227c0"
    assert request_key("j", "r|p@1", system=None, user="u", images_digest="d", choices=None, json_schema="{}",
                       max_tokens=None, temperature=None, seed=3, send_seed=False) == "c3ada10f11c17bc48adc8b67391ccde1"


def test_attempt_keys_are_unchanged():
    assert attempt_key("k", 0) == "k"
    assert attempt_key("k", 1) == "4874b387f180236a2cf0d421cb6c4d09"  # re-ask at the default temperature
    assert attempt_key("k", 2, None) == "3d844865968b0632ec3b485df7189f93"  # resent unchanged
    assert attempt_key("k", 1, 0.9) == "0afbb91cb2c9047136ff42a2be252169"  # re-ask at another temperature


def test_stage_keys_are_unchanged():
    assert caption_key("f", "c", "rev", "prompt", {"a": 1}) == "37fc938351f9239e0106599597f24c0f"
    assert frames_key("dig", "uniform:8", "224x224") == "6d26d8506e4d2eb8e3b3e3ac72c10e6f"


def test_dataset_key_of_a_table_is_the_key_of_its_rows():
    """The dataset digest (in every cell key) is hashed batch by batch; its bytes are those of the whole row list's
    canonical JSON, so run folders keyed before still match."""
    import pyarrow as pa

    from capeval.engine.keys import content_key, dataset_table_key

    rows = [{"item_id": f"i{n}", "video_id": f"v{n // 3}", "annotation": "é \"q\" ✓" if n % 2 else None,
             "options": ["a", "b"] if n % 5 else None, "n": n} for n in range(23)]
    table = pa.Table.from_pylist(rows)
    digests = {"v0": "abc", "v1": None}
    for n in (0, 1, 6, 7, 23):
        part = table.slice(0, n)
        for batch in (1, 3, 7, 4096):
            assert dataset_table_key(part, digests, batch_rows=batch) == \
                content_key("dataset", part.to_pylist(), digests)
    assert dataset_table_key(table.slice(0, 2), {}) == "5549ed54fc4a435934fa0c442c561a04"
