"""VC-Inspector's augmentation rules (engine/protocols/vcinspector/augment.py), checked against the paper's definition
(§4.1): for a caption with objects O and actions A and a replaced subset R, score = 1 - |R| / (|O| + |A|), then an
integer 1-5 label (capeval's conversion: 5 only when nothing is replaced, each lower label a quarter of [0, 1))."""

from __future__ import annotations

import re
import tomllib
from fractions import Fraction
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest

from capeval.engine.protocols.vcinspector import augment
from capeval.engine.protocols.vcinspector.parsing import parse_official

PACK = Path(__file__).resolve().parents[3] / "shared" / "protocols" / "vcinspector.toml"


def paper_score(objects: list[str], actions: list[str], replaced: set[str]) -> Fraction:
    """Eq. 1 of the paper, literally: R is a subset of O u A, and |O u A| = |O| + |A| (disjoint by construction)."""
    universe = [("o", o) for o in objects] + [("a", a) for a in actions]
    assert replaced <= set(universe)
    return 1 - Fraction(len(replaced), len(objects) + len(actions))


def expected_label(score: Fraction) -> int:
    """The documented bins, written out one by one (not the formula under test)."""
    if score == 1:
        return 5
    if score >= Fraction(3, 4):
        return 4
    if score >= Fraction(1, 2):
        return 3
    if score >= Fraction(1, 4):
        return 2
    return 1


@pytest.mark.parametrize("m,n", [(m, n) for m in range(0, 7) for n in range(0, 7) if m + n > 0])
def test_every_k_of_every_caption_size_follows_the_paper(m, n):
    objects, actions = [f"obj{i}" for i in range(m)], [f"act{j}" for j in range(n)]
    universe = [("o", o) for o in objects] + [("a", a) for a in actions]
    for k in range(m + n + 1):
        for replaced in combinations(universe, k):  # every subset R of size k: the score depends on |R| only
            score = paper_score(objects, actions, set(replaced))
            assert augment.quality_score(k, m + n) == score
            assert augment.quality_label(k, m + n) == expected_label(score)


def test_labels_by_hand_and_their_shape():
    table = {1: [5, 1], 2: [5, 3, 1], 3: [5, 3, 2, 1], 4: [5, 4, 3, 2, 1], 5: [5, 4, 3, 2, 1, 1],
             8: [5, 4, 4, 3, 3, 2, 2, 1, 1]}
    for n, labels in table.items():
        assert [augment.quality_label(k, n) for k in range(n + 1)] == labels
    for n in range(1, 60):
        labels = [augment.quality_label(k, n) for k in range(n + 1)]
        assert labels[0] == 5 and labels[-1] == 1  # untouched caption 5, everything replaced 1
        assert all(a >= b for a, b in zip(labels, labels[1:]))  # more errors never score higher
        assert labels.count(5) == 1  # 5 only for a caption with nothing replaced
        if n >= 4:
            assert set(labels) == {1, 2, 3, 4, 5}  # every label is reachable
        assert augment.quality_score(0, n) == 1 and augment.quality_score(n, n) == 0


@pytest.mark.parametrize("k,n", [(0, 0), (1, 0), (-1, 3), (4, 3), (1.5, 3), (True, 3)])
def test_undefined_scores_are_refused(k, n):
    with pytest.raises(ValueError):
        augment.quality_score(k, n)
    with pytest.raises(ValueError):
        augment.quality_label(k, n)


def test_draws_are_uniform_counts_of_distinct_elements_and_seeded():
    m, n, trials = 3, 2, 6000
    ks, ls = np.zeros(m + 1), np.zeros(n + 1)
    for t in range(trials):
        s = augment.draw_sample(m, n, "obj_act", augment.sample_rng(7, "src", "obj_act", t))
        assert len(set(s.objects)) == len(s.objects) and set(s.objects) <= set(range(m))
        assert len(set(s.actions)) == len(s.actions) and set(s.actions) <= set(range(n))
        ks[len(s.objects)] += 1
        ls[len(s.actions)] += 1
    # K ~ Unif{0..M}, L ~ Unif{0..N}: each count within 4 standard errors of trials / (size + 1)
    for counts in (ks, ls):
        p = 1 / len(counts)
        assert np.all(np.abs(counts / trials - p) < 4 * np.sqrt(p * (1 - p) / trials)), counts
    only_obj = augment.draw_sample(3, 2, "obj", augment.sample_rng(0, "x", 1))
    only_act = augment.draw_sample(3, 2, "act", augment.sample_rng(0, "x", 1))
    assert only_obj.actions == () and only_act.objects == ()
    again = [augment.draw_sample(5, 5, "obj_act", augment.sample_rng(1, "s", i)) for i in range(20)]
    assert again == [augment.draw_sample(5, 5, "obj_act", augment.sample_rng(1, "s", i)) for i in range(20)]
    assert again != [augment.draw_sample(5, 5, "obj_act", augment.sample_rng(2, "s", i)) for i in range(20)]
    with pytest.raises(ValueError):
        augment.draw_sample(1, 1, "attributes", augment.sample_rng(0))


def test_literal_replacement_is_whole_word_and_keeps_case():
    assert augment.replace_literal("A man plays. The Man waves.", "man", "woman") == "A woman plays. The Woman waves."
    assert augment.replace_literal("A woman manages a manor.", "man", "dog") is None  # never inside a word
    assert augment.replace_literal("He is riding a bike.", "is riding", "is pushing") == "He is pushing a bike."
    assert augment.replace_literal("Kids play ping-pong.", "ping-pong", "chess") == "Kids play chess."
    assert augment.replace_literal("A cat sleeps.", "dog", "cat") is None
    assert augment.replace_literal("A cat sleeps.", "  ", "dog") is None


def test_official_extraction_reads_list_literals_and_runs_nothing():
    assert augment.parse_list_literal('["man", "guitar"]') == ["man", "guitar"]
    assert augment.parse_list_literal("  ['a', \"b\"]\n") == ["a", "b"]
    assert augment.parse_list_literal("[]") == []
    for bad in ("man, guitar", "__import__('os').getcwd()", "{'a': 1}", "", None, "[1, 2"):
        with pytest.raises(ValueError):
            augment.parse_list_literal(bad)
    assert augment.clean_elements([" red  ball", "Red Ball", "", 3, "dog"]) == ["red ball", "dog"]


def test_strict_explanations_name_the_wrong_elements():
    t = augment.ExplanationTemplates(none="fine", objects="bad objects: {objects}", actions="bad actions: {actions}",
                                     both="{objects} / {actions}")
    assert t.explain([], []) == "fine"
    assert t.explain(["violin", "beach"], []) == "bad objects: violin, beach"
    assert t.explain([], ["sits"]) == "bad actions: sits"
    assert t.explain(["violin"], ["sits", "naps"]) == "violin / sits, naps"


@pytest.mark.skipif(not PACK.is_file(), reason="the official VC-Inspector pack is not beside the project")
def test_official_explanation_matches_the_official_readme_example():
    """The sentence read from the paper's fine-tuning prompt (pack `paper/A.6_finetune`) gives, for one wrong object,
    exactly the answer the official README shows (quoted in the pack's judge/score `output` field)."""
    data = tomllib.loads(PACK.read_text(encoding="utf-8"))
    prompts = {p["id"]: p for p in data["prompt"]}
    t = augment.templates_from_finetune_prompt(prompts["paper/A.6_finetune"]["user"], none="fine")
    example = re.search(r"README example: '(\d)\\n(.+?)'\)", prompts["judge/score"]["output"])
    assert example, prompts["judge/score"]["output"]
    wrong = re.search(r"\(([^)]+)\)", example.group(2)).group(1)
    assert t.explain([wrong], []) == example.group(2)
    assert all(augment.quality_label(1, n) == int(example.group(1)) for n in range(4, 30))  # one wrong of >= 4: a 4
    both = t.explain(["violin"], ["sits"])
    assert "(violin)" in both and "(sits)" in both and both.endswith(".")
    assert t.explain([], ["sits"]).endswith("(sits) are incorrect.") and t.explain([], []) == "fine"


def test_finetune_target_is_what_the_official_parser_reads():
    for label in range(1, 6):
        target = augment.finetune_target(label, "  The objects (violin) are wrong. \n")
        assert parse_official(target) == (label, "The objects (violin) are wrong.")
    with pytest.raises(ValueError):
        augment.finetune_target(0, "x")
    rec = augment.chat_record("v/0", "<video>\nrate it", "4\n\nwhy", "/data/v.mp4")
    assert rec == {"id": "v/0", "messages": [{"role": "user", "content": "<video>\nrate it"},
                                             {"role": "assistant", "content": "4\n\nwhy"}], "videos": ["/data/v.mp4"]}
    assert "videos" not in augment.chat_record("v/0", "u", "4\n\nwhy", None)
