"""Judges named on a command line, as the commands that ask several judges read them (a benchmark's
subcommand with `--judges`, `capeval construct --judge`): a judge is NAME or NAME@LABEL (the same backend twice with
different options), and `--judge-option [LABEL:]KEY=VALUE` gives an option to every judge or to the one with that label.

A library below the commands and the benchmark packages that define commands (engine/protocols/<name>/cli.py), so
that both read the same syntax; the user's mistakes are UsageErrors naming the option."""

from __future__ import annotations

import json

from capeval.engine.errors import UsageError


def judge_specs(text: str, flag: str = "--judges") -> list[tuple[str, str]]:
    """[(backend name, label)] from a comma-separated NAME[@LABEL] list; labels are unique."""
    specs = []
    for part in (s.strip() for s in text.split(",")):
        if not part:
            continue
        name, _, label = part.partition("@")
        specs.append((name, label or name))
    labels = [label for _, label in specs]
    if len(set(labels)) != len(labels):
        raise UsageError(f"{flag} {text!r}: the same judge twice; tell them apart as NAME@LABEL")
    if not specs:
        raise UsageError(f"{flag}: no judge given")
    return specs


def judge_options(pairs: list[str], labels: list[str]) -> dict[str, dict]:
    """label -> {option: value} from `--judge-option [LABEL:]KEY=VALUE` pairs (a value is parsed as JSON when it
    parses); an option without a label goes to every judge."""
    out: dict[str, dict] = {label: {} for label in labels}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise UsageError(f"--judge-option {pair!r}: expected [LABEL:]KEY=VALUE")
        target, colon, name = key.partition(":")
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = value
        if colon:
            if target not in out:
                raise UsageError(f"--judge-option {pair!r}: no judge labelled {target!r} (judges: {labels})")
            out[target][name] = parsed
        else:
            for opts in out.values():
                opts[key] = parsed
    return out


def option_text(value) -> str:
    """An option value parsed by judge_options written back so that the CLI's option parser reads the same value."""
    if isinstance(value, str):
        try:
            json.loads(value)
        except json.JSONDecodeError:
            return value  # plain text: read back as text
    return json.dumps(value)
