"""Declared parameters: what a protocol or a backend accepts, each named once with its type, default and valid range,
so that a typo in a name or a value out of range is a usage error naming the parameter and the valid ones -- at
`sweep --check` and before any run (engine/sweep/validation.py, engine/judge_run/options.py) -- never a silently ignored
setting or a run whose every request fails.

Protocols declare `params` (engine/protocols/base.py). Judges and captioners declare theirs on the class: `params`
(each constructor parameter: name, types, default or REQUIRED, description, valid range), `config_class` when they
also take the fields of a config dataclass (the HTTP backends: capeval.adapters.openai_http.HTTPConfig) and
`passes_through` when other names go on to the engine (vLLM's engine arguments). `--check`, `capeval judge`,
`capeval list` and the judge factory read these declarations (`accepted_params`), never the constructor's signature.
"""

from __future__ import annotations

import json
import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from capeval.engine.errors import UsageError

REQUIRED = object()  # a parameter with no default


@dataclass(frozen=True)
class Param:
    """One parameter: its name, the Python types a value may have (empty: any), its default, and optionally the
    values allowed (`choices`), a numeric range (`low`/`high`, inclusive unless `low_open`/`high_open`) and a
    `check` that raises ValueError for a value the protocol's own code would refuse (its message says why), and
    (protocols) whether its metrics read it."""

    name: str
    types: tuple[type, ...] = ()
    default: Any = None
    doc: str = ""
    choices: tuple | None = None
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    check: Callable[[Any], Any] | None = None
    metrics: bool = False  # a protocol param its metrics read too (the sweep passes it to compute_metrics)

    def valid(self) -> str:
        """What a valid value is, in words (for error messages and `capeval list`)."""
        if self.choices is not None:
            return "one of " + ", ".join(map(repr, self.choices))
        names = "/".join("none" if t is type(None) else t.__name__ for t in self.types) or "any value"
        bounds = []
        if self.low is not None:
            bounds.append(f"{'>' if self.low_open else '>='} {self.low:g}")
        if self.high is not None:
            bounds.append(f"{'<' if self.high_open else '<='} {self.high:g}")
        return names + (f" {' and '.join(bounds)}" if bounds else "")

    def problem(self, value: Any) -> str | None:
        """Why `value` is not valid for this parameter; None when it is."""
        if self.choices is not None:
            if value in self.choices and not isinstance(value, bool) or value is None and None in self.choices:
                return None
            return f"must be {self.valid()}, got {value!r}"
        if self.types and not fits(value, self.types):
            return f"expected {self.valid()}, got {type(value).__name__} ({value!r})"
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if isinstance(value, float) and math.isnan(value):
                return f"expected {self.valid()}, got nan"
            if self.low is not None and (value < self.low or self.low_open and value == self.low):
                return f"must be {self.valid()}, got {value!r}"
            if self.high is not None and (value > self.high or self.high_open and value == self.high):
                return f"must be {self.valid()}, got {value!r}"
        if self.check is not None:
            try:
                self.check(value)
            except (ValueError, TypeError) as exc:
                return str(exc)
        return None


def accepted_params(cls: Any) -> tuple[dict[str, Any], bool]:
    """({name: default, or REQUIRED}, open_ended) of what the backend class `cls` takes, as it declares it: its
    `params`, then the fields of its `config_class`; open-ended with `passes_through`. A backend that declares no
    `params` (a test's or a plugin's) takes any name: its constructor judges them."""
    declared = getattr(cls, "params", None)
    if declared is None:
        return {}, True
    named = {p.name: p.default for p in declared}
    config_cls = getattr(cls, "config_class", None)
    if config_cls is not None:
        for f in dataclasses.fields(config_cls):
            if f.default is not dataclasses.MISSING:
                named.setdefault(f.name, f.default)
            else:
                named.setdefault(f.name, REQUIRED if f.default_factory is dataclasses.MISSING else f.default_factory())
    return named, bool(getattr(cls, "passes_through", False))


def fits(value: Any, types: Iterable[type]) -> bool:
    """`value` is of one of `types` (an int is a float too; a bool is no number)."""
    types = tuple(types)
    if isinstance(value, bool):
        return bool in types
    if isinstance(value, int) and float in types:
        return True
    return isinstance(value, types)


def param_problems(declared: Iterable[Param], params: Mapping[str, Any], what: str) -> list[tuple[str, str]]:
    """(param name, message) for every parameter of `params` that `declared` does not name (the message lists the
    valid names) and every value a declared parameter refuses. `what` names the owner ("protocol '<name>'")."""
    by_name = {p.name: p for p in declared}
    out = []
    for key, value in params.items():
        param = by_name.get(key)
        if param is None:
            out.append((key, f"{what} has no parameter {key!r} (valid: {', '.join(sorted(by_name)) or 'none'})"))
        elif (msg := param.problem(value)) is not None:
            out.append((key, msg))
    return out


def key_values(pairs: list[str], flag: str) -> dict:
    """A repeated KEY=VALUE flag (--param, --judge-option) as a dict: a value is read as JSON when it parses
    (`n=3`, `flag=true`, `x=null`), else kept as the text given."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{flag} {pair!r}: expected KEY=VALUE")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out
