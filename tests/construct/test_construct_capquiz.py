"""`capeval construct capquiz` end to end on generated videos with dense descriptions: generation replayed, the type,
domain and blind steps answered by the local judge, dedup by sentence embeddings (strict) or by the paper's LLM
clustering (official, with the benchmark's own pack), answer positions balanced; the items load in `capeval judge`
and give metrics, and a second run sends nothing."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from capeval.adapters.replay import ReplayJudge
from capeval.engine.cli import main
from capeval.engine.inputs import read_items
from capeval.engine.registry import register

from _capquiz_inputs import generated_questions, generation_replies, make_videos

OFFICIAL_PACK = Path(__file__).resolve().parents[2].parent / "shared" / "protocols" / "capquiz.toml"
TEN = {"Entity", "Attribute", "Action", "Event", "Setting", "Relational Reasoning", "Causal Reasoning",
       "Interpretive Reasoning", "Intent & Emotion Reasoning", "Grounding Reasoning"}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("capquiz-construct")
    videos, truths = make_videos(folder / "videos")
    replies = folder / "replies.jsonl"
    replies.write_text("".join(json.dumps(r) + "\n" for r in generation_replies(truths)))
    return videos, truths, replies


def _construct(out: Path, videos: Path, replies: Path, *extra: str) -> int:
    return main(["construct", "capquiz", "--input", str(videos), "--out", str(out), "--judge", "local",
                 "--step-judge", "generate=replay", "--judge-option", f"replay:replies={replies}", "--no-progress",
                 *extra])


def test_strict_run_builds_filtered_balanced_items(inputs, tmp_path, capsys):
    videos, truths, replies = inputs
    out = tmp_path / "quiz"
    assert _construct(out, videos, replies) == 0
    items = read_items(out / "items.jsonl", benchmark="capquiz")
    record = pq.read_table(out / "record.parquet").to_pylist()
    summary = json.loads((out / "construct.json").read_text())

    rows = items.to_pylist()
    assert rows and {r["category"] for r in rows} <= TEN
    # the malformed entry (4 options) of every video is rejected, with why
    malformed = [r for r in record if r["step"] == "generate" and not r["kept"]]
    assert len(malformed) == len(truths) and all("expected 5 options" in r["reason"] for r in malformed)
    # the question that states its answer is blindly solvable for the local judge: removed, every trial right
    by_question = {}
    for vid, t in truths.items():
        good = [q for q in generated_questions(vid, t) if len(q["options"]) == 5]
        for k, q in enumerate(good):
            by_question[f"{vid}/q{k:02d}"] = q
    giveaway = [i for i, q in by_question.items() if q["question"].startswith("The background is")]
    decided = {r["item_id"]: r for r in record if r["step"] in ("blind", "dedup") and r["trial"] is None}
    for item_id in giveaway:
        assert decided[item_id]["kept"] is False and "blindly solvable" in decided[item_id]["reason"]
        trials = [r for r in record if r["item_id"] == item_id and r["step"] == "blind" and r["trial"] is not None]
        assert len(trials) == 3 and all(r["reason"].endswith("right") for r in trials)
    # the paraphrased background question duplicates the original: one of the two goes, named in the record
    for vid in truths:
        pair = {f"{vid}/q00", f"{vid}/q04"}
        dup = [decided[i] for i in pair if decided[i]["step"] == "dedup"]
        if all(not decided[i]["kept"] and decided[i]["step"] == "blind" for i in pair):
            continue  # both blindly solvable: nothing left to de-duplicate
        assert len(dup) == 1 and json.loads(dup[0]["output"])["duplicate_of"] in pair
    assert {r["item_id"] for r in rows} == {i for i, r in decided.items() if r["kept"]}
    trials = [r for r in record if r["step"] == "blind" and r["trial"] is not None]
    assert len(trials) == 3 * len(by_question) and all(r["kept"] is None for r in trials)
    assert all(r["reason"].endswith((": right", ": wrong")) for r in trials)  # the local judge always answers
    assert any(r["reason"].endswith(": wrong") for r in trials)
    # the generator's labels stand where they name one of the ten types; "Counting" names none: classified
    classified = {r["item_id"] for r in record if r["step"] == "classify"}
    assert classified == {i for i, q in by_question.items() if q["category"] == "Counting"}
    for r in rows:
        if r["item_id"] not in classified:
            assert r["category"] == by_question[r["item_id"]]["category"]
    # answer positions: each of the 5 positions the same number of times, give or take one
    positions = Counter(r["options"].index(r["answer"]) for r in rows)
    assert max(positions.values()) - min(positions.get(p, 0) for p in range(5)) <= 1
    assert summary["steps"]["generate"]["sent"] == len(truths) and summary["items"] == len(rows)
    assert summary["pack"]["pack_name"] == "CapQuiz"

    # a second run: the same keys, everything from the cache, the same items
    assert _construct(out, videos, replies) == 0
    again = json.loads((out / "construct.json").read_text())
    assert all(s["sent"] == 0 for s in again["steps"].values()), again["steps"]
    assert read_items(out / "items.jsonl", benchmark="capquiz").to_pylist() == rows

    # the items judge: captions = the descriptions, local judge -> CapQuiz metrics
    captions = tmp_path / "captions.jsonl"
    captions.write_text("".join(json.dumps({"video_id": json.loads(line)["video_id"],
                                            "caption": json.loads(line)["description"]}) + "\n"
                                for line in videos.read_text().splitlines()))
    capsys.readouterr()
    code = main(["judge", "--protocol", "capquiz", "--items", str(out / "items.jsonl"), "--captions", str(captions),
                 "--judge", "local", "--out", str(tmp_path / "v.parquet"), "--metrics", str(tmp_path / "m.csv"),
                 "--resamples", "50", "--cache", str(tmp_path / "jc"), "--no-progress"])
    assert code == 0
    metrics = (tmp_path / "m.csv").read_text()
    assert "CapF1" in metrics and "CapP" in metrics
    verdicts = pq.read_table(tmp_path / "v.parquet")
    assert verdicts.num_rows == len(rows)


def test_step_judge_must_cover_every_judged_step(inputs, tmp_path, capsys):
    videos, _, replies = inputs
    code = main(["construct", "capquiz", "--input", str(videos), "--out", str(tmp_path / "x"),
                 "--step-judge", "generate=replay", "--judge-option", f"replay:replies={replies}"])
    assert code == 2
    assert "no judge for step(s) taxonomy, classify, blind" in capsys.readouterr().err


class CapturingReplay(ReplayJudge):
    """The replay judge, keeping every request it is sent (what the official prompts looked like on the wire)."""

    sent: list = []

    def judge(self, requests):
        CapturingReplay.sent.extend(requests)
        return super().judge(requests)


register("judge", "replay-capture")(CapturingReplay)


def _official_replies(truths: dict) -> list[dict]:
    """Replies in the paper's formats: taxonomy JSON scores, the generation, a type for the unmapped label, blind
    letters (right for the giveaway question, wrong otherwise) and the nested dedup clusters."""
    from capeval.engine.protocols.capquiz.filtering import BlindProtocol
    from capeval.engine.schemas import ITEMS
    import pyarrow as pa

    replies = generation_replies(truths)
    cands = []
    for vid, t in truths.items():
        replies.append({"item_id": vid, "step": "taxonomy", "text": '{"Animation": 0.7, "Science": 0.2}'})
        good = [q for q in generated_questions(vid, t) if len(q["options"]) == 5]
        for k, q in enumerate(good):
            cands.append({"benchmark": "capquiz", "task": "x", "item_id": f"{vid}/q{k:02d}", "video_id": vid,
                          "annotation": q["question"], "options": q["options"], "answer": q["answer"]})
            if q["category"] == "Counting":
                replies.append({"item_id": f"{vid}/q{k:02d}", "step": "classify", "text": "Attribute"})
        # survivors of the blind check: q00-q04 and q06; q00 and q04 ask the same thing
        replies.append({"item_id": vid, "step": "dedup", "text": "[[[0, 4]], [[1]], [[2]], [[3]], [[5]]]"})
    blind = BlindProtocol(prompts=str(OFFICIAL_PACK)).requests(pa.Table.from_pylist(cands, schema=ITEMS),
                                                                judge="r", judge_revision="r", trials=3)
    for row in blind.to_pylist():
        correct = json.loads(row["context"])["parse"]["correct"]
        giveaway = row["user"].count("The background is") > 0
        replies.append({"item_id": row["item_id"], "step": "blind", "seed": row["seed"],
                        "text": correct if giveaway else ("A" if correct != "A" else "B")})
    return replies


@pytest.mark.skipif(not OFFICIAL_PACK.is_file(), reason="the CapQuiz pack is not at ../shared/protocols")
def test_official_run_sends_the_papers_prompts_and_clusters_with_the_llm(inputs, tmp_path):
    from capeval.engine.packs import load_pack

    videos, truths, _ = inputs
    replies = tmp_path / "official.jsonl"
    replies.write_text("".join(json.dumps(r) + "\n" for r in _official_replies(truths)))
    CapturingReplay.sent.clear()
    out = tmp_path / "quiz"
    assert main(["construct", "capquiz", "--mode", "official", "--prompts", str(OFFICIAL_PACK), "--input",
                 str(videos), "--out", str(out), "--judge", "replay-capture",
                 "--judge-option", f"replies={replies}", "--no-progress"]) == 0
    pack = load_pack(OFFICIAL_PACK)
    descriptions = {json.loads(line)["video_id"]: json.loads(line)["description"]
                    for line in videos.read_text().splitlines()}
    sent = {(r.meta["step"], r.meta["item_id"], r.meta["trial"]): r for r in CapturingReplay.sent}
    gen = sent[("generate", "vid0", 0)]
    assert gen.user == pack.render("construct/qa_generation")[1] + "\n\nVideo description:\n" + descriptions["vid0"]
    assert gen.system is None and gen.temperature is None
    assert sent[("taxonomy", "vid1", 0)].user.startswith(pack.render("construct/video_taxonomy")[1])
    dedup = sent[("dedup", "vid0", 0)]
    assert dedup.user.startswith(pack.render("construct/dedup")[1] + "\n\n")
    listed = json.loads(dedup.user[len(pack.render("construct/dedup")[1]):])
    assert [e["index"] for e in listed] == list(range(6)) and listed[4]["question"].startswith("What is the color")

    record = pq.read_table(out / "record.parquet").to_pylist()
    decided = {r["item_id"]: r for r in record if r["step"] in ("blind", "dedup") and r["trial"] is None}
    for vid in truths:
        assert decided[f"{vid}/q05"]["kept"] is False and "blindly solvable" in decided[f"{vid}/q05"]["reason"]
        assert decided[f"{vid}/q04"]["kept"] is False and decided[f"{vid}/q04"]["step"] == "dedup"
        assert "the model grouped them" in decided[f"{vid}/q04"]["reason"]
        assert decided[f"{vid}/q00"]["kept"] is True
    rows = read_items(out / "items.jsonl", benchmark="capquiz").to_pylist()
    assert len(rows) == 5 * len(truths)
    counting = [r for r in rows if r["item_id"].endswith("/q06")]
    assert {r["category"] for r in counting} == {"Attribute"}  # the unmapped label, classified
    assert all(json.loads(r["extra"])["domain"] == "Animation" for r in rows)
    summary = json.loads((out / "construct.json").read_text())
    assert summary["mode"] == "official" and summary["pack"]["pack_digest"] == pack.digest
