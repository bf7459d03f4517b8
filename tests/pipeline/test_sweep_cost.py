"""Cost (issue 16): with prices set, the cost in results.parquet and run.json equals the usage the judge server
reported x the prices (its cached prompt tokens priced as cached); a rerun reuses every answer and says so
(cost_usd_cached, paid_in_run 0); `capeval plan` on the same sweep, before it runs, predicts its judge requests
exactly and its cost within 10%; answers of steps without verdict rows (LVCap-Eval's extract) are in their judge's
totals; price mistakes fail `--check` naming file, line and field.

Real components: the sweep runner on a local Ray, the OpenAI-compatible judge over HTTP against the loopback server
(benchmarks/loopback_server.py, prefix-cache mode: it reports cached prompt tokens), whose reported usage is recorded
as it is sent."""

from __future__ import annotations

import json

import polars as pl
import pytest

from capeval.engine.cli import main as capeval
from capeval.engine.sweep.config import load_sweep
from capeval.engine.sweep.runner import run_sweep

PRICES = {"input": 2.5, "cached_input": 1.25, "output": 10.0}
QUESTIONS = ["How many shapes are there?", "What colour is the largest shape?", "Which way does the circle move?"]


def _usd(usage: list[dict], prices: dict) -> float:
    total = 0.0
    for u in usage:
        cached = u["prompt_tokens_details"]["cached_tokens"]
        total += ((u["prompt_tokens"] - cached) * prices["input"] + cached * prices["cached_input"]
                  + u["completion_tokens"] * prices["output"]) / 1e6
    return total


@pytest.fixture
def server(monkeypatch):
    """The loopback judge server (prefix-cache mode), recording the usage of every answer it sends."""
    import capeval.benchmarks.loopback_server as loopback

    sent: list[dict] = []
    real = loopback.completion_body

    def recording(body, content, cache=None):
        out = real(body, content, cache)
        sent.append(json.loads(out)["usage"])
        return out

    monkeypatch.setattr(loopback, "completion_body", recording)
    with loopback.LoopbackServer(loopback.FaultConfig(cache_mode="prefix")) as s:
        s.usage = sent
        yield s


def _capquiz_sweep(root, base_url: str):
    with (root / "items.jsonl").open("w") as f:
        for v in range(5):
            for q, question in enumerate(QUESTIONS):
                f.write(json.dumps({"item_id": f"v{v}/q{q}", "video_id": f"v{v}", "task": "shapes",
                                    "annotation": question, "options": ["red", "blue", "two", "left"],
                                    "answer": "two", "category": "Attribute", "benchmark": "capquiz"}) + "\n")
    caption = "a red circle moves left past a blue square. "
    (root / "captions.jsonl").write_text("".join(
        json.dumps({"video_id": f"v{v}", "caption": f"Clip {v}: " + caption * (v + 1)}) + "\n" for v in range(5)))
    (root / "prices.toml").write_text('["loopback"]\n' + "".join(f"{k} = {v}\n" for k, v in PRICES.items()))
    return _sweep_file(root / "cost.toml", "capquiz", base_url, options='prices = "prices.toml"\n')


def _sweep_file(path, protocol: str, base_url: str, *, judge: str = "", options: str = ""):
    """A sweep of items.jsonl x captions.jsonl beside `path`, judged by `protocol` with the OpenAI-compatible judge
    on the loopback server; `judge` and `options` are extra lines of those tables."""
    path.write_text(f'''name = "{path.stem}"
[[datasets]]
name = "data"
kind = "items"
path = "items.jsonl"

[[captions]]
path = "captions.jsonl"
captioner = "mine"

[[protocols]]
name = "{protocol}"

[[judges]]
name = "openai"
params = {{ base_url = "{base_url}", model = "loopback", api_key = "test-key", structured = "vllm" }}
{judge}
[options]
n_resamples = 20
{options}''')
    return path


def _cell_costs(out) -> pl.DataFrame:
    results = pl.read_parquet(out / "results.parquet")
    return results.select("judge_requests", "prompt_tokens", "cached_prompt_tokens", "completion_tokens",
                          "judge_cost_usd", "caption_cost_usd", "cost_usd", "cost_usd_cached").unique()


@pytest.mark.parametrize("slice_rows", [None, 4], ids=["whole", "in-slices"])
def test_cost_is_reported_usage_times_prices_and_plan_predicts_it(tmp_path, ray_local, server, capsys, monkeypatch,
                                                                   slice_rows):
    if slice_rows is not None:  # the ledger reads a cell's verdict rows in slices (a big cell's): the same costs
        from capeval.engine.sweep import usage as ledger

        monkeypatch.setattr(ledger, "SLICE_ROWS", slice_rows)
    sweep = _capquiz_sweep(tmp_path, server.base_url)
    out = tmp_path / "out"
    assert capeval(["plan", str(sweep), "--json", "--cached-share", "simulate", "--out", str(out)]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert server.stats()["requests"] == 0  # planning sent nothing

    run_sweep(load_sweep(sweep), out, progress=False, log=lambda m: None)
    usage = server.usage
    assert len(usage) == server.stats()["requests"] == 15
    cached = sum(u["prompt_tokens_details"]["cached_tokens"] for u in usage)
    assert cached > 0  # the server served part of the prompts from its prefix cache
    expected = _usd(usage, PRICES)
    assert expected < _usd(usage, {**PRICES, "cached_input": PRICES["input"]})  # cached tokens priced as cached

    cell = _cell_costs(out)
    assert cell.height == 1  # one cell: every metric row carries the same cost
    row = cell.row(0, named=True)
    assert row["judge_requests"] == len(usage)
    assert row["prompt_tokens"] == sum(u["prompt_tokens"] for u in usage)
    assert row["cached_prompt_tokens"] == cached
    assert row["completion_tokens"] == sum(u["completion_tokens"] for u in usage)
    assert row["judge_cost_usd"] == pytest.approx(expected, rel=1e-6)
    assert row["cost_usd"] == pytest.approx(expected, rel=1e-6)
    assert row["caption_cost_usd"] is None  # captions read from a file: capeval made none
    assert row["cost_usd_cached"] == 0.0  # everything was paid by this run
    record = json.loads((out / "run.json").read_text())["runs"][-1]["cost"]
    judge = record["judges"]["openai"]
    assert judge["requests"] == len(usage)
    assert judge["cost_usd"] == pytest.approx(expected, rel=1e-6)
    assert judge["paid_in_run"]["cost_usd"] == pytest.approx(expected, rel=1e-6)
    assert judge["reused"]["requests"] == 0
    assert record["prices"]["judges"]["openai"]["source"].startswith("prices file prices.toml")
    assert record["total_usd"] == pytest.approx(expected, rel=1e-6)

    # the plan, made before the run: its requests exactly, its cost within 10%
    assert plan["judges"]["openai"]["requests"] == len(usage)
    first = [s for s in plan["steps"] if s["kind"].startswith("first")]
    assert sum(s["requests"] for s in first) == len(usage)
    assert plan["judges"]["openai"]["cost_usd_typical"] == pytest.approx(expected, rel=0.10)
    assert plan["judges"]["openai"]["prompt_tokens"] == pytest.approx(row["prompt_tokens"], rel=0.10)

    # a rerun into the same folder: nothing sent, the same cost, all of it reused
    run_sweep(load_sweep(sweep), out, progress=False, log=lambda m: None)
    assert server.stats()["requests"] == len(usage)
    again = _cell_costs(out).row(0, named=True)
    assert again["cost_usd"] == pytest.approx(expected, rel=1e-6)
    assert again["cost_usd_cached"] == pytest.approx(expected, rel=1e-6)
    record = json.loads((out / "run.json").read_text())["runs"][-1]["cost"]
    assert record["paid_in_run_usd"] == 0.0 and record["reused_usd"] == pytest.approx(expected, rel=1e-6)

    from capeval.engine.report.html import write_report

    page = write_report(out, n_resamples=20).read_text(encoding="utf-8")
    section = page[page.index('<section id="cost">'):]
    assert f"${expected:,.4f}" in section[:section.index("</section>")]


def test_answers_without_verdict_rows_count_in_their_judges_total(tmp_path, ray_local, server):
    """LVCap-Eval's extract step leaves no verdict row: its answer is in the judge's run.json total, so the total
    is still the server's usage x the prices, while the cell's columns hold the answers its verdict rows name."""
    with (tmp_path / "items.jsonl").open("w") as f:
        for v in range(3):
            events = ["a man opens a door", "he walks into the kitchen", f"he pours coffee {v}"]
            f.write(json.dumps({"benchmark": "lvcap", "task": "events", "item_id": f"v{v}", "video_id": f"v{v}",
                                "annotation": json.dumps(events), "answer": " ".join(events),
                                "category": "short"}) + "\n")
    (tmp_path / "captions.jsonl").write_text("".join(
        json.dumps({"video_id": f"v{v}", "caption": f"A man opens door {v} and pours coffee."}) + "\n"
        for v in range(3)))
    prices = {"input": 1.0, "cached_input": 0.5, "output": 4.0}
    sweep = _sweep_file(tmp_path / "lvcap-cost.toml", "lvcap", server.base_url,
                        judge="prices = { input = 1.0, cached_input = 0.5, output = 4.0 }\n")
    out = tmp_path / "out"
    run_sweep(load_sweep(sweep), out, progress=False, log=lambda m: None)
    expected = _usd(server.usage, prices)
    judge = json.loads((out / "run.json").read_text())["runs"][-1]["cost"]["judges"]["openai"]
    assert judge["requests"] == len(server.usage) == server.stats()["requests"]
    assert judge["untraced_requests"] >= 3  # one extract per caption
    assert judge["cost_usd"] == pytest.approx(expected, rel=1e-6)
    cell = _cell_costs(out).row(0, named=True)
    assert cell["judge_requests"] == judge["requests"] - judge["untraced_requests"]
    assert cell["judge_cost_usd"] < judge["cost_usd"]


def test_price_mistakes_fail_check_naming_file_line_and_field(tmp_path):
    from capeval.engine.sweep.config import SweepFileError

    (tmp_path / "items.jsonl").write_text(json.dumps({"item_id": "v0/q", "video_id": "v0", "task": "t",
                                                      "annotation": "q?", "options": ["a", "b"], "answer": "a",
                                                      "benchmark": "capquiz"}) + "\n")
    (tmp_path / "captions.jsonl").write_text(json.dumps({"video_id": "v0", "caption": "c"}) + "\n")
    (tmp_path / "prices.toml").write_text('["gpt-4o"]\ninput = 2.5\noutput = -1\ncolour = 3\n')
    text = ('name = "p"\n[[datasets]]\nname = "quiz"\nkind = "items"\npath = "items.jsonl"\n'
            '[[captions]]\npath = "captions.jsonl"\n[[protocols]]\nname = "capquiz"\n'
            '[[judges]]\nname = "local"\nprices = { input = "cheap", cached = 1, output = 2 }\n'
            '[options]\nprices = "{prices}"\n')
    sweep = tmp_path / "p.toml"
    sweep.write_text(text.replace("{prices}", "prices.toml"))
    with pytest.raises(SweepFileError) as err:
        load_sweep(sweep)
    problems = err.value.problems
    assert f"{sweep}, line 12: judges[0].prices.cached: unknown key 'cached'" in "\n".join(problems)
    assert any(p.startswith(f"{sweep}, line 12: judges[0].prices.input: expected a number") for p in problems)
    prices_file = tmp_path / "prices.toml"
    assert any(p.startswith(f"{prices_file}, line 3: ['gpt-4o'].output: must be 0 or more") for p in problems)
    assert any(p.startswith(f"{prices_file}, line 4: ['gpt-4o'].colour: unknown key") for p in problems)
    sweep.write_text(text.replace("{prices}", "nowhere.toml"))
    with pytest.raises(SweepFileError) as err:
        load_sweep(sweep)
    assert any(p.startswith(f"{sweep}, line 14: options.prices: prices file not found") for p in err.value.problems)


def test_answer_keys_hold_each_key_once_and_answer_for_whole_batches():
    from capeval.engine.sweep.usage import AnswerKeys

    keys = AnswerKeys()
    assert len(keys) == 0 and not keys.contains(AnswerKeys.digests(["a"])).any()
    first = [f"{i:032x}" for i in range(0, 3000, 2)]
    keys.add(AnswerKeys.digests(first + first[:10]))  # a key twice in a batch counts once
    keys.add(AnswerKeys.digests([f"{i:032x}" for i in range(0, 3000, 3)]))  # half of these were in already
    assert len(keys) == len({i for i in range(3000) if i % 2 == 0 or i % 3 == 0})
    asked = [f"{i:032x}" for i in range(3000)] + ["not a hex key", ""]
    got = keys.contains(AnswerKeys.digests(asked))
    assert got.tolist() == [i % 2 == 0 or i % 3 == 0 for i in range(3000)] + [False, False]
    assert not keys.contains(AnswerKeys.digests([])).size


def test_usage_summed_on_columns_equals_usage_added_answer_by_answer():
    """`Split.add_answers` (a cell's answers summed on columns) gives the totals of `Split.add` one answer at a time:
    paid when stored since the run began, reused when earlier or not in the cache (created None), missing token
    counts as 0."""
    import random

    from capeval.engine.sweep.usage import Split

    rng = random.Random(7)
    since = 1000.0
    for _ in range(50):
        answers = [(f"judge-{rng.randrange(2)}",
                    *(rng.choice([None, rng.randrange(5000)]) for _ in range(4)),
                    rng.choice([None, since - 1.0, since, since + rng.random() * 10]))
                   for _ in range(rng.randrange(0, 40))]
        one_by_one, at_once = Split(), Split()
        for answer in answers:
            one_by_one.add(answer[5] is not None and answer[5] >= since, *answer[1:5])
        at_once.add_answers(answers, since)
        assert at_once == one_by_one
