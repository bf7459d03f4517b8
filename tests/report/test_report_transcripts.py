"""The report's sample browser shows, for every system, the caption judged, the judge's prompt, its reply, the
parse and the verdict (issue 16, item 1). Systems judged from a `[[captions]]` file used to show no caption at all:
the browser joined captions from the run folder's captions/, which holds only the captions the sweep made; a file's
captions are read, never copied there. Both now come from the cell's judge transcripts. Checked in a real headless
Chromium on a sweep that judges a captioner's captions and a caption file's side by side."""

from __future__ import annotations

import json

import polars as pl
import pytest
from _browser import Browser, chromium_path
from _sweeps import sweep_toml

from capeval.engine.report.html import write_report
from capeval.engine.sweep.config import load_sweep
from capeval.engine.sweep.runner import run_sweep

FILE_CAPTIONS = {"shapes-000": "A hand-written caption: two shapes drift to the left over a grey floor.",
                 "shapes-001": "A hand-written caption: one circle bounces twice, then stops."}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, ray_local):
    base = tmp_path_factory.mktemp("file-captions")
    captions = base / "mine.jsonl"
    captions.write_text("".join(json.dumps({"video_id": v, "caption": c}) + "\n" for v, c in FILE_CAPTIONS.items()))
    sweep = base / "sweep.toml"
    sweep.write_text(sweep_toml("file-captions", n_videos=2, prompts=("brief",), frames=("uniform:2",))
                     + f'\n[[captions]]\npath = "{captions}"\ncaptioner = "mymodel"\n')
    out = base / "out"
    assert run_sweep(load_sweep(sweep), out, progress=False, log=lambda m: None).exit_code == 0
    write_report(out, n_resamples=20)
    return out


def _details(browser: Browser, captioner: str) -> list[dict]:
    """Open every row of one system (a page of the browser) and read its detail blocks by name."""
    browser.evaluate(f"""(() => {{ const s = document.getElementById('filter-captioner');
        s.value = {json.dumps(captioner)}; s.dispatchEvent(new Event('change')); }})()""")
    return browser.evaluate("""(() => {
        const out = [];
        for (const tr of Array.from(document.querySelectorAll('#samples-table tr.row'))) {
            tr.click();
            const d = tr.nextSibling, got = {item: tr.cells[6].textContent};
            for (const pre of d.querySelectorAll('pre')) { got[pre.className.slice(7)] = pre.textContent; }
            out.push(got);
            tr.click();
        }
        return out; })()""")


def test_sample_browser_shows_caption_and_judge_prompt_for_every_system(run_dir):
    if chromium_path() is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    pytest.importorskip("websockets.sync.client", reason="the DevTools driver needs the websockets package")
    transcripts = pl.read_parquet(run_dir / "transcripts")
    prompts = {(r["item_id"], r["caption"]): r["user"] for r in transcripts.iter_rows(named=True)}
    browser = Browser()
    try:
        browser.load((run_dir / "report.html").resolve().as_uri())
        assert browser.errors() == []
        for captioner in ("mymodel", "local"):
            rows = _details(browser, captioner)
            assert len(rows) == transcripts.height // 2 > 0
            for row in rows:
                for part in ("caption", "judge_system", "judge_prompt", "raw_output", "attempts"):
                    assert row.get(part), (captioner, part, row)
                assert row["caption"] in row["judge_prompt"]
                assert row["judge_prompt"] == prompts[(row["item"], row["caption"])]  # exactly what was sent
                assert row["attempts"].startswith("attempt 0 (sent")
            if captioner == "mymodel":  # the file's own text, for the file's system
                assert {r["caption"] for r in rows} == set(FILE_CAPTIONS.values())
        assert browser.errors() == []
    finally:
        browser.close()
