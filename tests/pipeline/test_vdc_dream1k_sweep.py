"""VDC and DREAM-1K through the front door (issue 28, item 3 and "Done when"): one sweep file with a generated
dataset of each (`vdc_synthetic`, `dream1k_synthetic`) runs `vdc` and `dream1k` end to end with the local judge
(the packages' stand-in answers), in strict mode and, with the official packs beside the project
(../shared/protocols/vdc.toml, autodq.toml), in official mode; and every command a user meets picks the two
protocols up with no engine file naming them: `capeval list`, `sweep --check`, `plan` (and a mistyped param
refused by both, naming it), `report` (their sections), `compare` (two captioners), `judge validate` (on the real
VDC question sets and DREAM-1K clips, read in place) and `construct --list`.

Real components: the capeval CLI's entry function in this process with one real local Ray, generated H.264
videos, the local captioner, a caption file as a second captioner, the local judge."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import polars as pl
import pytest

from capeval.engine.cli import main as cli_main
from capeval.engine.datasets.registry import load as load_dataset
from capeval.engine.exitcodes import OK, USAGE
from capeval.engine.registry import lookup
from capeval.engine.sweep.config import SweepFileError, load_sweep

REPO = Path(__file__).resolve().parents[2]
PACKS = REPO.parent / "shared" / "protocols"
VDC_KINDS = ("short", "detailed", "background", "main_object", "camera")
N_VIDEOS = 3
#: dataset name -> (kind, the protocol that reads it)
DATASETS = {"vdcsyn": ("vdc_synthetic", "vdc"), "dreamsyn": ("dream1k_synthetic", "dream1k")}
#: the caption file's captioner: one plain sentence per video, so the two captioners' numbers differ
FILE_CAPTION = "A still grey frame; nothing moves and nothing else is visible."


def _official_packs() -> bool:
    return (PACKS / "vdc.toml").is_file() and (PACKS / "autodq.toml").is_file()


def _protocol_entries(bad: str | None = None) -> list[tuple[str, str, dict]]:
    """(protocol name, label, params) of the sweep: each protocol in strict mode, and in official mode with its pack
    when the packs are beside the project. `bad`: that protocol's strict entry also gets an undeclared param."""
    entries = [("vdc", "vdc", {}), ("dream1k", "dream1k", {})]
    if _official_packs():
        entries += [("vdc", "vdc-official", {"mode": "official", "prompts": str(PACKS / "vdc.toml")}),
                    ("dream1k", "dream1k-official", {"mode": "official", "prompts": str(PACKS / "autodq.toml")})]
    if bad:
        entries = [(n, label, {**params, "bogus_param": 1}) if label == bad else (n, label, params)
                   for n, label, params in entries]
    return entries


def _toml_value(value) -> str:
    return json.dumps(value)  # strings and numbers are written alike in TOML and JSON


def sweep_text(captions: dict[str, Path], *, bad: str | None = None) -> str:
    """Both generated datasets, the local captioner with a prompt that names no VDC kind (`brief`: judged on every
    kind) and one that names one (`vdc_detailed`: judged on the detailed questions only), a caption file per
    dataset as the second captioner ("mine", at the same prompt id and frame spec as `brief`), every protocol entry
    and the local judge. No `datasets` on the protocols: each judges the datasets its declarations accept."""
    lines = ['name = "vdc-dream1k"', 'prompts = ["brief", "vdc_detailed"]', 'frames = ["uniform:2"]']
    for name, (kind, _) in DATASETS.items():
        lines += ["", "[[datasets]]", f'name = "{name}"', f'kind = "{kind}"', f"n_videos = {N_VIDEOS}",
                  "duration_s = 1.0"]
    lines += ["", "[[captioners]]", 'name = "local"']
    for name, path in captions.items():
        lines += ["", "[[captions]]", f"path = {_toml_value(str(path))}", f'dataset = "{name}"', 'captioner = "mine"',
                  'prompt_id = "brief"', 'frame_spec = "uniform:2"']
    for protocol, label, params in _protocol_entries(bad):
        lines += ["", "[[protocols]]", f'name = "{protocol}"', f'label = "{label}"']
        if params:
            lines.append("params = { " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in params.items()) + " }")
    lines += ["", "[[judges]]", 'name = "local"', "", "[options]", "n_resamples = 20"]
    return "\n".join(lines) + "\n"


def _caption_files(root: Path) -> tuple[dict[str, Path], dict[str, pl.DataFrame]]:
    """One caption file per generated dataset, naming the videos its kind generates (loaded here once with the
    same params as the sweep's; a kind's items are a function of its params and dataset name), and the items."""
    files, items = {}, {}
    for name, (kind, _) in DATASETS.items():
        loaded = load_dataset(kind, {"n_videos": N_VIDEOS, "duration_s": 1.0}, base_dir=root,
                              out_dir=root / "probe", name=name)
        items[name] = pl.from_arrow(loaded.items)
        ids = sorted(set(items[name]["video_id"]))
        assert len(ids) == N_VIDEOS, (kind, ids)
        files[name] = root / f"{name}-captions.jsonl"
        files[name].write_text("".join(json.dumps({"video_id": v, "caption": FILE_CAPTION}) + "\n" for v in ids))
    return files, items


@pytest.fixture(scope="module")
def run(tmp_path_factory, ray_local):
    root = tmp_path_factory.mktemp("vdc-dream1k")
    captions, items = _caption_files(root)
    sweep = root / "sweep.toml"
    sweep.write_text(sweep_text(captions))
    out = root / "run"
    code = cli_main(["sweep", str(sweep), "--out", str(out), "--no-progress"])
    return {"root": root, "sweep": sweep, "captions": captions, "items": items, "out": out, "code": code}


def _verdicts(out: Path) -> pl.DataFrame:
    """The run's verdict rows with the protocol entry's label (`label`: a verdict row names the protocol, the
    cell's metrics name the entry), joined on the cell key."""
    verdicts = pl.concat([pl.read_parquet(p) for p in sorted((out / "verdicts").glob("*.parquet"))],
                         how="diagonal_relaxed")
    labels = pl.concat([pl.read_parquet(p).select("cell_key", pl.col("protocol").alias("label"))
                        for p in sorted((out / "metrics").glob("*.parquet"))]).unique()
    assert labels["cell_key"].n_unique() == labels.height  # one entry per cell
    return verdicts.join(labels, on="cell_key", how="left")


def _results(out: Path) -> pl.DataFrame:
    return pl.read_parquet(out / "results.parquet")


def _labels() -> list[str]:
    return [label for _, label, _ in _protocol_entries()]


def _rows_of(verdicts: pl.DataFrame, label: str) -> pl.DataFrame:
    """The stored verdict rows of one protocol entry (a sweep keeps each protocol's final step only)."""
    rows = verdicts.filter(pl.col("label") == label)
    assert rows.height, label
    return rows


# ---------------------------------------------------------------------------------------------------- the run


def test_the_sweep_runs_vdc_and_dream1k_end_to_end_with_the_local_judge(run):
    assert run["code"] == OK
    results = _results(run["out"])
    assert set(results["protocol"]) == set(_labels())
    # each protocol judged only its own dataset (its declarations accept it; the other one is skipped)
    pairs = set(results.select("protocol", "dataset").unique().rows())
    assert pairs == {(label, "vdcsyn" if label.startswith("vdc") else "dreamsyn") for label in _labels()}, pairs
    verdicts = _verdicts(run["out"])
    assert set(verdicts["label"]) == set(_labels()) and set(verdicts["protocol"]) == {"vdc", "dream1k"}
    # every item got a verdict on the first ask's reply: the stand-in answers parse in both modes
    assert set(verdicts["item_status"]) == {"ok"}, \
        verdicts.filter(pl.col("item_status") != "ok").select("protocol", "step", "error").head(5).to_dicts()
    assert int(results["n_no_verdict"].fill_null(0).max()) == 0
    for label in _labels():
        videos = set(_rows_of(verdicts, label)["video_id"])
        dataset = "vdcsyn" if label.startswith("vdc") else "dreamsyn"
        assert videos == set(run["items"][dataset]["video_id"]), (label, videos)
    # both captioners were judged by every protocol
    assert {(p, c) for p, c in results.select("protocol", "captioner").unique().rows()} == \
        {(label, c) for label in _labels() for c in ("local", "mine")}


def test_a_vdc_caption_is_judged_on_the_kind_its_prompt_names(run):
    """`vdc_detailed` names one kind: its captions answer the detailed questions only; `brief` names none: its
    captions answer every kind's questions (the generated dataset has all five)."""
    verdicts = _verdicts(run["out"])
    for label in [x for x in _labels() if x.startswith("vdc")]:
        rows = _rows_of(verdicts, label).filter(pl.col("captioner") == "local")
        by_prompt = {p: set(g["task"]) for (p,), g in rows.group_by("prompt_id")}
        assert by_prompt == {"brief": set(VDC_KINDS), "vdc_detailed": {"detailed"}}, (label, by_prompt)
        # one verdict per question of the kinds judged: every question of the dataset under `brief`, the detailed
        # ones under `vdc_detailed`
        items = run["items"]["vdcsyn"]
        for prompt, questions in (("brief", items), ("vdc_detailed", items.filter(pl.col("task") == "detailed"))):
            judged = rows.filter(pl.col("prompt_id") == prompt)
            assert sorted(judged["item_id"]) == sorted(questions["item_id"]), (label, prompt)


def _reading(value: str | None) -> str | None:
    return value.replace("-", "_") if value else value


def test_vdc_results_have_per_kind_acc_and_score_and_the_derived_vdcscore(run):
    """Per kind Acc and Score, and VDCscore over the five (task `all`); a value the rules leave undefined is null
    with its reason, never a number. Strict mode drops no video: every kind's means are over all of them."""
    results = _results(run["out"])
    for label in [x for x in _labels() if x.startswith("vdc")]:
        cell = results.filter((pl.col("protocol") == label) & (pl.col("captioner") == "local")
                              & (pl.col("prompt_id") == "brief"))
        assert cell.height, label
        for reading, rows in cell.group_by("reading"):
            metrics = {(r["task"], r["metric"]) for r in rows.iter_rows(named=True)}
            for kind in VDC_KINDS:
                assert {(kind, "Acc"), (kind, "Score")} <= metrics, (label, reading, sorted(metrics))
            assert ("all", "VDCscore") in metrics, (label, reading, sorted(metrics))
        for row in cell.iter_rows(named=True):
            if row["value"] is None:
                assert row["reason"], row
            else:
                assert math.isfinite(row["value"]), row
        if label == "vdc":
            per_kind = cell.filter(pl.col("task").is_in(VDC_KINDS))
            assert set(per_kind["n"]) == {N_VIDEOS}, per_kind.select("task", "metric", "value", "n").to_dicts()
            assert per_kind["value"].null_count() == 0


def test_vdc_official_mode_reports_the_official_and_the_lmms_eval_reading(run):
    if not _official_packs():
        pytest.skip("the official packs are not beside the project")
    results = _results(run["out"])
    official = results.filter(pl.col("protocol") == "vdc-official")
    assert {_reading(r) for r in official["reading"]} == {"official", "lmms_eval"}, set(official["reading"])
    # the lmms-eval port averages over every document (no zero filter): its per-kind means are over all videos
    port = official.filter((pl.col("reading").map_elements(_reading, return_dtype=pl.String) == "lmms_eval")
                           & pl.col("task").is_in(VDC_KINDS) & (pl.col("captioner") == "local")
                           & (pl.col("prompt_id") == "brief"))
    assert set(port["n"]) == {N_VIDEOS}, port.select("task", "metric", "n").to_dicts()
    strict = results.filter(pl.col("protocol") == "vdc")
    assert {_reading(r) for r in strict["reading"]} <= {"strict", None}, set(strict["reading"])


def test_dream1k_results_have_overall_and_per_source_precision_recall_f1(run):
    """OVERALL (bucket `all`) and per-source F1, precision and recall, and the breakdowns by the release's
    attributes (duration, shots, subjects, events), each value a percentage or null with its reason."""
    results = _results(run["out"])
    for label in [x for x in _labels() if x.startswith("dream1k")]:
        cell = results.filter((pl.col("protocol") == label) & (pl.col("captioner") == "local")
                              & (pl.col("prompt_id") == "brief"))
        assert cell.height, label
        overall = cell.filter(pl.col("bucket") == "all")
        assert {"F1", "precision", "recall"} <= set(overall["metric"]), (label, set(overall["metric"]))
        assert overall.filter(pl.col("metric").is_in(["F1", "precision", "recall"]))["value"].null_count() == 0
        buckets = set(cell["bucket"])
        for prefix in ("source:", "duration", "shots", "subjects", "events"):
            assert any(b.startswith(prefix) for b in buckets), (label, prefix, sorted(buckets))
        for row in cell.iter_rows(named=True):
            if row["value"] is None:
                assert row["reason"], row
            else:
                assert 0 <= row["value"] <= 100, row


# ------------------------------------------------------------------------------------- check, plan, list, ...


def test_check_and_plan_accept_the_sweep(run, capsys):
    capsys.readouterr()
    assert cli_main(["sweep", str(run["sweep"]), "--check"]) == OK
    out = capsys.readouterr().out
    for label in _labels():
        assert f"protocol={label} " in out or f"protocol={label}\n" in out, (label, out)
    assert cli_main(["plan", str(run["sweep"]), "--json"]) == OK
    plan = json.loads(capsys.readouterr().out)
    steps = {(s["protocol"], s["step"]): s for s in plan["steps"]}
    for label in _labels():
        first = [s for (p, _), s in steps.items() if p == label and s["kind"].startswith("first step")]
        assert first and all(s["requests"] > 0 for s in first), (label, sorted(steps))


@pytest.mark.parametrize("label", ["vdc", "dream1k"])
def test_check_and_plan_refuse_a_param_the_protocol_does_not_declare(run, label, tmp_path, capsys):
    path = tmp_path / "bad.toml"
    path.write_text(sweep_text(run["captions"], bad=label))
    index = _labels().index(label)
    line = [n for n, text in enumerate(path.read_text().splitlines(), 1) if "bogus_param" in text]
    assert len(line) == 1
    with pytest.raises(SweepFileError) as info:
        load_sweep(path)
    problems = info.value.problems
    assert len(problems) == 1, problems
    assert f"line {line[0]}: protocols[{index}].params.bogus_param" in problems[0], problems
    declared = sorted(p.name for p in lookup("protocol", label).params)
    assert "valid: " + ", ".join(declared) in problems[0], problems
    capsys.readouterr()
    assert cli_main(["sweep", str(path), "--check"]) == USAGE
    assert "bogus_param" in capsys.readouterr().err
    assert cli_main(["plan", str(path)]) == USAGE
    assert "bogus_param" in capsys.readouterr().err


def _block(text: str, start: str) -> str:
    """The lines of `capeval list` from the line starting with `start` (two-space indent) to the next entry."""
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith(f"  {start} "))
    rest = [line for line in lines[first + 1:]]
    end = next((i for i, line in enumerate(rest) if not line.startswith("      ")), len(rest))
    return "\n".join([lines[first], *rest[:end]])


def test_list_shows_both_protocols_and_their_dataset_kinds_with_params(capsys):
    capsys.readouterr()
    assert cli_main(["list", "protocols"]) == OK
    protocols = capsys.readouterr().out
    for name in ("vdc", "dream1k"):
        block = _block(protocols, name)
        declared = [p.name for p in lookup("protocol", name).params]
        assert {"mode", "prompts"} <= set(declared), declared
        for param in declared:
            assert f"      {param} " in block, (name, param, block)
        assert "placeholder" not in block, block
    assert cli_main(["list", "kinds"]) == OK
    kinds = capsys.readouterr().out
    expected = {"vdc": {"path", "kinds", "media_root"}, "vdc_synthetic": {"n_videos", "seed", "duration_s"},
                "dream1k_synthetic": {"n_videos", "seed", "duration_s"}}
    for kind, params in expected.items():
        block = _block(kinds, kind)
        assert "placeholder" not in block and "not built" not in block, block
        assert len(block.splitlines()[0].split(None, 1)[1]) > 20, block  # a description
        for param in params:
            assert f"      {param} " in block, (kind, param, block)
    # the rule a user needs to pick caption prompts (which caption is judged on which kind), said where VDC is
    # listed: its protocol, its dataset kinds or its caption prompts
    assert cli_main(["list", "prompts"]) == OK
    prompts = capsys.readouterr().out
    vdc_lines = [_block(protocols, "vdc"), _block(kinds, "vdc"), _block(kinds, "vdc_synthetic"),
                 *(line for line in prompts.splitlines() if line.startswith("  vdc_"))]
    assert any(re.search(r"names? no kind|every kind|all (five )?kinds", line) for line in vdc_lines), vdc_lines


def test_construct_list_works_with_both_registered(capsys):
    from capeval.engine import construct

    capsys.readouterr()
    assert cli_main(["construct", "--list"]) == OK
    out = capsys.readouterr().out
    for name in construct.pipelines():
        assert name in out
    assert {"capability-qa", "capquiz", "lvcap", "vcinspector"} <= set(construct.pipelines())


def test_report_renders_their_sections(run):
    html_path = run["root"] / "report.html"
    assert cli_main(["report", str(run["out"]), "--out", str(html_path)]) == OK
    html = html_path.read_text()
    for label in _labels():
        assert label in html, label
    for name in ("vdc", "dream1k"):  # the sections a protocol adds (JudgeProtocol.report_sections), if any
        for section in lookup("protocol", name).report_sections(run["out"]):
            assert f'id="{section.anchor}"' in html and section.title in html, (name, section.anchor)
    results = _results(run["out"])
    for metric in set(results["metric"]):
        assert metric in html, metric


def test_compare_two_captioners(run, capsys):
    """`compare --a captioner=local --b captioner=mine`: one pair per protocol entry and metric over the same
    videos; in strict mode each side's value is the system's overall value of that metric in the run's results
    (VDC: task `all`; DREAM-1K: bucket `all`): what the user compares is what the results table shows."""
    capsys.readouterr()
    assert cli_main(["compare", str(run["out"]), "--a", "captioner=local", "--b", "captioner=mine", "--json",
                     "--resamples", "100"]) == OK
    rows = json.loads(capsys.readouterr().out)["comparisons"]
    results = _results(run["out"])
    for label in _labels():
        mine = [r for r in rows if r.get("protocol") == label]
        assert mine, (label, sorted({r.get("protocol") for r in rows}))
        for r in mine:
            assert r["differs"] == "captioner" and (r["a"], r["b"]) == ("local", "mine"), r
            assert r["n_videos"] == N_VIDEOS, r
            if r["a_value"] is not None and r["b_value"] is not None:
                assert r["diff"] == pytest.approx(r["a_value"] - r["b_value"]), r
            if label in ("vdc", "dream1k"):
                # VDC's compared Acc is the mean of the per-kind Acc over the kinds compared: with all five, the
                # results' VDCscore
                names = {r["metric"], "VDCscore"} if label == "vdc" and r["metric"] == "Acc" else {r["metric"]}
                for side in ("a", "b"):
                    overall = (pl.col("task") == "all").fill_null(False) | (pl.col("bucket") == "all").fill_null(False)
                    shown = results.filter((pl.col("protocol") == label) & (pl.col("captioner") == r[side])
                                           & (pl.col("prompt_id") == "brief") & pl.col("metric").is_in(names)
                                           & overall)
                    values, got = shown["value"].to_list(), r[f"{side}_value"]
                    # an undefined value (null in the results, with its reason) is undefined in compare too
                    assert any((v is None and got is None) or (v is not None and got is not None
                                                               and v == pytest.approx(got)) for v in values), \
                        (label, r["metric"], side, got, values)


def test_compare_across_protocols_ranks_the_systems_of_each_pair_of_entries(run, capsys):
    """`compare --across protocols`: the strict and official entries of each protocol scored the same systems
    (three: local at two prompts, the caption file), so each pair gets a rank agreement over the same videos."""
    capsys.readouterr()
    assert cli_main(["compare", str(run["out"]), "--across", "protocols", "--json", "--resamples", "50"]) == OK
    report = json.loads(capsys.readouterr().out)
    pairs = {(r["a"], r["b"]) for r in report["rank_agreement"]}
    expected = {tuple(sorted(p)) for p in (("vdc", "vdc-official"), ("dream1k", "dream1k-official"))} \
        if _official_packs() else set()
    assert expected <= {tuple(sorted(p)) for p in pairs}, pairs
    for r in report["rank_agreement"]:
        assert r["n_systems"] == 3 and r["n_videos"] == N_VIDEOS, r


# --------------------------------------------------------------------------------- judge validate (real data)


def _vdc_release(shared_data: Path, folder: Path) -> tuple[list[str], Path]:
    """Two kinds' files with their first two videos each (real questions; three videos, the first one in both
    files): the first video captioned with its reference answers, the others with a generic sentence (so the
    verdicts are mixed)."""
    release = folder / "vdc"
    release.mkdir()
    answers: dict[str, list[str]] = {}
    for kind in ("detailed", "camera"):
        lines = (shared_data / "vdc" / f"{kind}.jsonl").read_text(encoding="utf-8").splitlines()[:2]
        (release / f"{kind}.jsonl").write_text("\n".join(lines) + "\n")
        for line in lines:
            ((video, qa),) = json.loads(line).items()
            answers.setdefault(video, []).extend(f"{q['answer'].rstrip('.')}." for q in qa)
    first = next(iter(answers))
    path = folder / "vdc-captions.jsonl"
    path.write_text("".join(json.dumps({"video_id": v, "caption": " ".join(a) if v == first else FILE_CAPTION})
                            + "\n" for v, a in answers.items()))
    return ["--dataset", "vdc", "--items", str(release), "--captions", str(path)], path


def _dream1k_release(shared_data: Path, folder: Path) -> tuple[list[str], Path]:
    """The first four clips of DREAM-1K (the file read in place); their own reference as caption for two, another
    clip's for the other two."""
    from capeval.engine.protocols.lvcap import dream1k  # the release reader of the `dream1k` dataset kind

    clips = dream1k.load_clips(shared_data / "dream1k" / "DREAM-1k.jsonl").slice(0, 4)
    refs, vids = clips["answer"].to_pylist(), clips["video_id"].to_pylist()
    path = folder / "dream1k-captions.jsonl"
    path.write_text("".join(json.dumps({"video_id": v, "caption": refs[i] if i % 2 == 0 else refs[(i + 1) % 4]})
                            + "\n" for i, v in enumerate(vids)))
    return ["--dataset", "dream1k", "--items", str(shared_data / "dream1k" / "DREAM-1k.jsonl"), "--limit", "4",
            "--captions", str(path)], path


@pytest.mark.parametrize("protocol", ["vdc", "dream1k"])
def test_judge_validate_agrees_with_itself_and_counts_changed_verdicts(protocol, shared_data, tmp_path):
    """The local judge's verdicts as the reference: validating the local judge against them agrees exactly; a copy
    with every third judged verdict changed to another of the protocol's codes agrees on exactly the rest."""
    inputs, _ = (_vdc_release if protocol == "vdc" else _dream1k_release)(shared_data, tmp_path)
    cache = ["--cache", str(tmp_path / "cache"), "--no-progress"]
    reference = tmp_path / "reference.parquet"
    assert cli_main(["judge", "--protocol", protocol, *inputs, "--judge", "local", "--out", str(reference),
                     *cache]) == OK
    verdicts = pl.read_parquet(reference)
    judged = verdicts.filter(pl.col("verdict") >= 0)
    assert judged.height >= 8 and judged["verdict"].n_unique() >= 1, verdicts.head()

    def validate(path: Path, name: str) -> dict:
        out = tmp_path / f"{name}.json"
        code = cli_main(["judge", "validate", "--protocol", protocol, *inputs, "--reference", str(path),
                         "--judge", "local", "--resamples", "100", "--json", "--out", str(out), *cache])
        assert code == OK, name
        return json.loads(out.read_text())

    same = validate(reference, "same")
    assert same["overall"]["n"] == judged.height and same["overall"]["agreement"] == 1.0
    assert same["overall"]["n_judge_no_verdict"] == 0
    for metric, entry in same["overall"]["metrics"].items():
        if entry["bias"] is not None:
            assert entry["bias"] == 0.0, (metric, entry)

    # the protocol's named codes, else (dream1k: lvcap's several code enums) the codes its judged rows hold
    codes = sorted(set(lookup("protocol", protocol).verdict_labels()) | set(judged["verdict"].to_list()))
    assert len(codes) >= 2, codes
    order = verdicts.with_row_index("_row")
    flip = set(order.filter(pl.col("verdict") >= 0)["_row"].to_list()[::3])
    other = {c: codes[(codes.index(c) + 1) % len(codes)] for c in codes}
    changed = order.with_columns(
        pl.when(pl.col("_row").is_in(list(flip))).then(pl.col("verdict").replace_strict(other, default=None))
        .otherwise(pl.col("verdict")).cast(verdicts.schema["verdict"]).alias("verdict")).drop("_row")
    path = tmp_path / "changed.parquet"
    changed.write_parquet(path)
    report = validate(path, "changed")
    assert report["overall"]["n"] == judged.height
    assert report["overall"]["agreement"] == pytest.approx(1 - len(flip) / judged.height, abs=1e-12)
