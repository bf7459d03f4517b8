"""Every protocol, judge and captioner parameter is declared (engine/params.py): a name the component does not read,
or a value out of its range, is exit 2 naming the parameter and the valid ones -- at `sweep --check`, before a
sweep runs, and on `capeval judge` / `capeval score` -- never a silently ignored setting (`averge=per_video` used
to run with the default average) or a run whose every caption fails as retryable (`gpu_memory_utilization = 7`)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from capeval.adapters.replay import ReplayJudge
from capeval.engine.cli import main as cli_main
from capeval.engine.exitcodes import USAGE
from capeval.engine.params import Param
from capeval.engine.registry import lookup, names, register
from capeval.engine.sweep.config import SweepFileError, load_sweep


def _captions(folder: Path) -> Path:
    p = folder / "caps.jsonl"
    p.write_text('{"video_id": "v", "caption": "A red ball."}\n')
    return p


def _sweep(folder: Path, body: str, top: str = "") -> Path:
    p = folder / "sweep.toml"
    p.write_text(f'name = "params"\n{top}[[datasets]]\nname = "d"\nkind = "synthetic"\nn_videos = 1\n'
                 f'[[captions]]\npath = "{_captions(folder)}"\n' + textwrap.dedent(body))
    return p


def _problems(path: Path) -> list[str]:
    with pytest.raises(SweepFileError) as info:
        load_sweep(path)
    return info.value.problems


def test_protocol_param_typo_is_refused_at_check_with_the_valid_names(tmp_path, capsys):
    path = _sweep(tmp_path, '[[protocols]]\nname = "capquiz"\nparams = { averge = "per_video" }\n'
                            '[[protocols]]\nname = "capquiz"\nlabel = "hot"\nparams = { temperature = "hot" }\n'
                            '[[judges]]\nname = "local"\n')
    problems = _problems(path)
    assert len(problems) == 2, problems
    assert "protocols[0].params.averge" in problems[0] and "'averge'" in problems[0], problems
    assert "valid: average, confidence, mode, paper_compatible, prompts, shuffle" in problems[0], problems
    assert "protocols[1].params.temperature" in problems[1] and "'hot'" in problems[1], problems
    assert cli_main(["sweep", str(path), "--check"]) == USAGE
    assert "averge" in capsys.readouterr().err


def test_captioner_values_are_checked_against_the_backends_declaration(tmp_path):
    path = _sweep(tmp_path, '''\
        [[captioners]]
        name = "local"
        params = { latency_s = "slow" }
        [[captioners]]
        name = "local"
        label = "neg"
        params = { max_in_flight = 0 }
        [[captioners]]
        name = "vllm"
        params = { model = "m", max_model_len = "big", gpu_memory_utilization = 7, tensor_parallel_size = 0 }
        ''', top='prompts = ["brief"]\nframes = ["uniform:2"]\n')
    problems = _problems(path)
    joined = "\n".join(problems)
    for field, why in (("captioners[0].params.latency_s", "expected float"),
                       ("captioners[1].params.max_in_flight", ">= 1"),
                       ("captioners[2].params.max_model_len", "expected int"),
                       ("captioners[2].params.gpu_memory_utilization", "<= 1, got 7"),
                       ("captioners[2].params.tensor_parallel_size", ">= 1, got 0")):
        assert any(field in p and why in p for p in problems), (field, joined)
    assert len(problems) == 5, joined


def test_judge_cli_refuses_unknown_protocol_params_and_judge_options(tmp_path, capsys):
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"item_id": "q1", "video_id": "v", "task": "action", "annotation": "What moves?",
                                 "options": ["a ball", "a cat"], "answer": "a ball"}) + "\n")
    captions = _captions(tmp_path)
    base = ["judge", "--protocol", "capquiz", "--items", str(items), "--captions", str(captions),
            "--out", str(tmp_path / "v.parquet"), "--no-progress"]
    assert cli_main(base + ["--judge", "local", "--param", "averge=per_video"]) == USAGE
    err = capsys.readouterr().err
    assert "averge" in err and "valid: average" in err, err
    assert cli_main(base + ["--judge", "local", "--judge-option", "bogus=1"]) == USAGE
    assert "does not accept 'bogus'" in capsys.readouterr().err
    # a vLLM judge's values are refused before its engine starts
    assert cli_main(base + ["--judge", "vllm", "--judge-model", str(tmp_path / "no-model"),
                            "--judge-option", "gpu_memory_utilization=7"]) == USAGE
    assert "gpu_memory_utilization: must be float > 0 and <= 1, got 7" in capsys.readouterr().err
    assert not (tmp_path / "v.parquet").exists()


def test_score_cli_refuses_a_param_typo(tmp_path, capsys):
    verdicts = tmp_path / "verdicts.jsonl"
    verdicts.write_text(json.dumps({"item_id": "q1", "video_id": "v", "captioner": "c", "prompt_id": "p",
                                    "frame_spec": "f", "verdict": 1}) + "\n")
    rc = cli_main(["score", "--protocol", "capquiz", "--verdicts", str(verdicts), "--out", str(tmp_path / "m.csv"),
                   "--param", "averge=per_video"])
    assert rc == USAGE
    assert "averge" in capsys.readouterr().err
    assert not (tmp_path / "m.csv").exists()


def test_every_builtin_protocol_declares_what_its_code_reads():
    """The declaration is the list: each declared param has a default and a valid-value text, and the params the
    CLI's own help names for each protocol are declared (a param dropped from the declaration would be refused)."""
    for name in names("protocol"):
        protocol = lookup("protocol", name)
        if protocol.params is None:
            continue  # a plugin that declares nothing (tests/toy_protocol)
        declared = {p.name for p in protocol.params}
        assert {"mode", "prompts", "confidence"} <= declared, (name, declared)
        assert protocol.check_params("strict", {p.name: p.default for p in protocol.params
                                                if p.default is not None}) == [], name


def test_a_sweep_passes_every_declared_metrics_param_to_the_metrics(tmp_path, ray_local):
    """`type_families` (like `confidence`, `paper_compatible`, `event_average`, `con_tokens`, ...) is declared as a
    metrics param, so a sweep's metrics honour it as `capeval score --param` does (the sweep used to pass only
    `mode` and `average`: a declared param would have been accepted and then ignored)."""
    import polars as pl

    from capeval.engine.sweep.runner import run_sweep

    caps = tmp_path / "caps.jsonl"
    caps.write_text("".join(f'{{"video_id": "d-00{k}", "caption": "A red ball."}}\n' for k in range(2)))
    path = tmp_path / "sweep.toml"
    path.write_text('name = "metrics"\n[[datasets]]\nname = "d"\nkind = "synthetic"\nn_videos = 2\n'
                    f'[[captions]]\npath = "{caps}"\n'
                    '[[protocols]]\nname = "capquiz"\nlabel = "plain"\n'
                    '[[protocols]]\nname = "capquiz"\nlabel = "mapped"\nparams = { type_families = '
                    '{ action = "Mine", counting = "Mine", object = "Mine", scene = "Mine" } }\n'
                    '[[judges]]\nname = "local"\n[options]\nn_resamples = 0\n')
    results = run_sweep(load_sweep(path), tmp_path / "out", progress=False, log=lambda m: None).results
    families = {p: set(results.filter(pl.col("protocol") == p)["family"].drop_nulls().to_list())
                for p in ("plain", "mapped")}
    assert "Mine" in families["mapped"] and "Mine" not in families["plain"], families


def test_a_refused_credential_value_is_never_printed(tmp_path, capsys):
    """A param value refused by its declaration is named in the message, except a credential's (the message is
    printed and may be logged)."""
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"item_id": "q1", "video_id": "v", "task": "action", "annotation": "What moves?",
                                 "options": ["a ball", "a cat"], "answer": "a ball"}) + "\n")
    rc = cli_main(["judge", "--protocol", "capquiz", "--items", str(items), "--captions", str(_captions(tmp_path)),
                   "--judge", "openai", "--judge-model", "m", "--base-url", "http://127.0.0.1:9/v1",
                   "--judge-option", "api_key=987654321", "--out", str(tmp_path / "v.parquet"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == USAGE and "api_key" in err and "987654321" not in err, err
    path = _sweep(tmp_path, '[[protocols]]\nname = "capquiz"\n[[judges]]\nname = "openai"\n'
                            'params = { model = "m", base_url = "ftp://me:hunter2secret@host/v1" }\n')
    problems = _problems(path)
    assert any("judges[0].params.base_url" in p for p in problems), problems
    assert not any("hunter2secret" in p for p in problems), problems


def test_capeval_list_prints_the_declarations(capsys):
    assert cli_main(["list", "protocols"]) == 0
    out = capsys.readouterr().out
    assert "average" in out and "one of 'pooled', 'per_video'" in out, out
    assert cli_main(["list", "captioners"]) == 0
    out = capsys.readouterr().out
    assert "gpu_memory_utilization (default 0.85; float > 0 and <= 1)" in out, out
    assert "latency_s (default 0.0; float >= 0)" in out, out


@register("judge", "unannotated-replay")
class UnannotatedReplay(ReplayJudge):
    params = ReplayJudge.params + (Param("delay_s", (float,), 0.0, "seconds before each answer"),)

    def __init__(self, replies, delay_s: float = 0.0, **kwargs):
        super().__init__(replies, **kwargs)
        self.delay_s = delay_s


def test_a_judge_param_declared_without_types_takes_any_value(tmp_path, capsys):
    """A judge param declared with no types (ReplayJudge's `replies`: a file or a list of rows) gets the value the
    user gives: nothing to check it against, so nothing refuses it; a typed one beside it is still checked."""
    from capeval.engine.sweep.validation import param_value_problems

    replies = tmp_path / "replies.jsonl"
    replies.write_text(json.dumps({"item_id": "q1", "step": "answer", "text": "A"}) + "\n")
    assert param_value_problems(UnannotatedReplay, {"replies": str(replies)}) == []
    assert param_value_problems(UnannotatedReplay, {"replies": str(replies), "delay_s": "slow"})  # still checked
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"item_id": "q1", "video_id": "v", "task": "action", "annotation": "What moves?",
                                 "options": ["a ball", "a cat"], "answer": "a ball"}) + "\n")
    out = tmp_path / "v.parquet"
    rc = cli_main(["judge", "--protocol", "capquiz", "--items", str(items), "--captions", str(_captions(tmp_path)),
                   "--judge", "unannotated-replay", "--judge-option", f"replies={replies}", "--out", str(out),
                   "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert out.is_file()


def test_every_builtin_backend_declares_its_params_with_a_description():
    """Judges and captioners declare their params on the class (engine/params.py) as protocols do: every own param
    has a description, and the checks, `capeval list` and the judge factory read the declaration (accepted_params)."""
    from capeval.engine.params import REQUIRED, accepted_params

    from importlib.metadata import entry_points

    # The builtins are the installed entry points; other tests register their own stand-ins in the same registry.
    for kind, group in (("judge", "capeval.judges"), ("captioner", "capeval.captioners")):
        builtins = sorted(ep.name for ep in entry_points(group=group))
        assert builtins, group
        for name in builtins:
            cls = lookup(kind, name)
            assert isinstance(cls.params, tuple), (kind, name)
            assert all(p.doc for p in cls.params), (kind, name, [p.name for p in cls.params if not p.doc])
            named, _ = accepted_params(cls)
            assert [p.name for p in cls.params] == list(named)[:len(cls.params)], (kind, name)
    assert accepted_params(lookup("captioner", "vllm"))[0]["model"] is REQUIRED
    assert accepted_params(lookup("judge", "openai"))[0]["timeout_s"] == 120.0  # its config's fields


def test_a_backend_that_declares_nothing_takes_any_name():
    from capeval.engine.params import accepted_params
    from capeval.engine.sweep.validation import constructor_problems

    class Undeclared:
        def __init__(self, **options):
            self.options = options

    assert accepted_params(Undeclared) == ({}, True)
    assert constructor_problems(Undeclared, {"anything": 1}, "judge 'undeclared'") == []
