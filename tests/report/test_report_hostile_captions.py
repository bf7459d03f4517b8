"""Captions are untrusted text: a caption holding `<!--<script>` (or `</script>`, U+2028) used to switch the HTML
parser into a state where the report's embedded sample data never ended, and the sample browser came up empty. A
real sweep judges such captions (read from a [[captions]] file, local judge, real local Ray) and its report must
embed them as JSON that parses back unchanged, with no raw `<` inside the data element. (The same texts are in the
items' questions: the sample browser shows those for caption cells read from files.)"""

from __future__ import annotations

import json
import re

from capeval.engine.report.html import script_json, write_report
from capeval.engine.sweep.config import load_sweep
from capeval.engine.sweep.runner import run_sweep

HOSTILE = ["<!--<script>", "</script><script>alert(1)</script>", "a & b > c \u2028 line \u2029 para <!-- -->"]


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def test_script_json_round_trips_and_has_no_markup():
    value = {"captions": HOSTILE, "n": 3}
    text = script_json(value)
    assert json.loads(text) == value
    assert not re.search(r"[<>&\u2028\u2029]", text)


def test_report_embeds_hostile_captions_safely(tmp_path, ray_local):
    items, captions = tmp_path / "items.jsonl", tmp_path / "captions.jsonl"
    with items.open("w") as f:
        for v in range(len(HOSTILE)):
            f.write(json.dumps({"item_id": f"v{v}/q", "video_id": f"v{v}", "task": "counting",
                                "annotation": f"How many shapes? {HOSTILE[v]}", "options": ["1", "2", "3", "4", "5"],
                                "answer": "2", "category": "counting", "benchmark": "capquiz"}) + "\n")
    captions.write_text("".join(json.dumps({"video_id": f"v{v}", "caption": c}) + "\n" for v, c in enumerate(HOSTILE)))
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(f'name = "hostile"\n[[datasets]]\nname = "quiz"\nkind = "items"\npath = "{items}"\n'
                     f'[[captions]]\npath = "{captions}"\ncaptioner = "mymodel"\n'
                     '[[protocols]]\nname = "capquiz"\n[[judges]]\nname = "local"\n[options]\nn_resamples = 20\n')
    out = tmp_path / "out"
    run_sweep(load_sweep(sweep), out, progress=False, log=lambda m: None)
    page = write_report(out, n_resamples=20).read_text(encoding="utf-8")
    start = page.index('<script type="application/json" id="samples-data">') + len(
        '<script type="application/json" id="samples-data">')
    body = page[start:page.index("</script>", start)]
    assert "<" not in body and ">" not in body  # nothing the HTML parser could read as markup
    data = json.loads(body)
    found = set(_strings(data))
    for caption in HOSTILE:
        assert any(caption in s for s in found), caption  # the text reaches the sample browser unchanged
    assert page.count('id="samples-data"') == 1 and page.rstrip().endswith("</html>")
