"""Prices of judges and captioners: USD per million tokens, read from the sweep file or a prices file.

    [[judges]]
    name = "openai"
    params = { model = "gpt-4o", ... }
    prices = { input = 2.5, cached_input = 1.25, output = 10.0 }

    [options]
    prices = "prices.toml"      # relative to the sweep file

    # prices.toml: one table per judge/captioner label, registry name or model
    ["gpt-4o"]
    input = 2.5
    cached_input = 1.25         # optional: prompt tokens the server served from its prefix cache; default `input`
    output = 10.0

Where a backend's prices come from, first match wins: its own `prices` table; the prices file's table named by
its label, its model (`params.model`) or its registry name; the price params of an OpenAI-compatible backend
(`price_prompt_per_m`, `price_cached_per_m`, `price_completion_per_m`). Without any, its cost is unknown (null),
never 0. Cost = (prompt - cached) x input + cached x cached_input + completion x output, per million; reasoning
tokens are part of the completion tokens servers report and are priced as output. A batch judge's prices are these
times (1 - its `batch_discount`) (`batch_prices`).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capeval.engine.inputs.rows import not_utf8
from capeval.engine.registry import lookup

PRICE_KEYS = ("input", "cached_input", "output")
_REQUIRED = ("input", "output")
_PARAM_PRICES = ("price_prompt_per_m", "price_cached_per_m", "price_completion_per_m")


@dataclass(frozen=True)
class Prices:
    """USD per million tokens; `source` says where they were found (shown in run.json and the report)."""

    input: float
    output: float
    cached_input: float | None = None  # None: priced as input
    source: str = ""

    def cost(self, prompt: int, cached: int, completion: int) -> float:
        cached = min(int(cached or 0), int(prompt or 0))
        cached_price = self.input if self.cached_input is None else self.cached_input
        return ((int(prompt or 0) - cached) * self.input + cached * cached_price
                + int(completion or 0) * self.output) / 1e6

    def as_dict(self) -> dict:
        return {"input": self.input, "cached_input": self.input if self.cached_input is None else self.cached_input,
                "output": self.output, "source": self.source}


def table_problems(value: Any) -> list[tuple[str | None, str]]:
    """(key, message) for a price table: a table of the known keys, numbers >= 0, input and output given."""
    if not isinstance(value, dict):
        return [(None, f"expected a table like {{ input = 2.5, cached_input = 1.25, output = 10.0 }} (USD per "
                       f"million tokens), got {type(value).__name__} ({value!r})")]
    out: list[tuple[str | None, str]] = []
    for key in value:
        if key not in PRICE_KEYS:
            out.append((key, f"unknown key {key!r} (allowed: {', '.join(PRICE_KEYS)})"))
    for key in PRICE_KEYS:
        if key not in value:
            if key in _REQUIRED:
                out.append((None, f"missing required key {key!r} (USD per million tokens)"))
            continue
        v = value[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            out.append((key, f"expected a number (USD per million tokens), got {type(v).__name__} ({v!r})"))
        elif v < 0 or v != v:
            out.append((key, f"must be 0 or more (USD per million tokens), got {v!r}"))
    return out


def from_table(value: dict, source: str) -> Prices:
    return Prices(float(value["input"]), float(value["output"]),
                  None if value.get("cached_input") is None else float(value["cached_input"]), source)


def prices_file_path(config) -> Path | None:
    """The prices file `[options] prices` names, relative to the sweep file; None when it names none."""
    name = getattr(config.options, "prices", None)
    if not name:
        return None
    p = Path(name).expanduser()
    return p if p.is_absolute() else config.path.parent / p


def read_prices_file(path: Path) -> tuple[dict[str, Prices], list[str]]:
    """({name: Prices}, problems): each problem names the file, the line and the field."""
    if not path.is_file():
        return {}, [f"prices file not found: {path}"]
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return {}, [str(not_utf8(path) or f"{path}: not UTF-8 text; save the file as UTF-8")]
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return {}, [f"{path}: invalid TOML: {exc}"]
    lines = text.splitlines()
    out, problems = {}, []
    for name, value in raw.items():
        found = [f"{path}{_at(lines, name, key)}: [{name!r}]{'.' + key if key else ''}: {msg}"
                 for key, msg in table_problems(value)]
        problems += found
        if not found:
            out[name] = from_table(value, f"prices file {path.name} [{name!r}]")
    return out, problems


def _at(lines: list[str], name: str, key: str | None) -> str:
    """", line N" of table `name` (its key's line when given) in a prices file; "" when not found."""
    head = re.compile(rf"^\s*\[\s*(\"{re.escape(name)}\"|'{re.escape(name)}'|{re.escape(name)})\s*\]")
    start = next((i for i, line in enumerate(lines) if head.match(line)), None)
    if start is None:
        return ""
    if key:
        rx = re.compile(rf"^\s*{re.escape(key)}\s*=")
        for i in range(start + 1, len(lines)):
            if lines[i].lstrip().startswith("["):
                break
            if rx.match(lines[i]):
                return f", line {i + 1}"
    return f", line {start + 1}"


def check_prices(config, c, *, check_paths: bool = True) -> None:
    """Price problems of a parsed sweep, into checker `c` (capeval.engine.sweep.checker): each component's `prices` table
    (file, line, field) and the prices file (its own file and line)."""
    for key in ("judges", "captioners"):
        for i, comp in enumerate(getattr(config, key)):
            if comp.prices is None:
                continue
            where = f"{c.where(key, i)}.prices"
            for field, msg in table_problems(comp.prices):
                c.fail(f"{where}.{field}" if field else where, msg, field or "prices")
    path = prices_file_path(config)
    if path is not None and check_paths:
        if not path.is_file():
            c.fail("options.prices", f"prices file not found: {path}", "prices")
        else:
            c.problems.extend(read_prices_file(path)[1])


def resolve_prices(config) -> dict[tuple[str, str], Prices | None]:
    """("judge" | "captioner", label) -> the Prices that apply (see the module docstring), or None."""
    path = prices_file_path(config)
    book = read_prices_file(path)[0] if path is not None and path.is_file() else {}
    out: dict[tuple[str, str], Prices | None] = {}
    for kind, comps in (("judge", config.judges), ("captioner", config.captioners)):
        for comp in comps:
            prices = component_prices(comp, book)
            out[(kind, comp.display)] = batch_prices(comp, prices) if kind == "judge" else prices
    return out


def batch_prices(comp, prices: Prices | None) -> Prices | None:
    """A batch judge (adapters/batch_rounds.py: openai-batch, vllm-batch) pays its prices x (1 - batch_discount):
    its `batch_discount` param, else the backend's default (OpenAI's Batch API: 0.5). Prices that are batch prices
    already go with batch_discount = 0 (docs/batch.md)."""
    try:
        default = getattr(lookup("judge", comp.name), "default_batch_discount", None)
    except KeyError:
        return prices
    if prices is None or default is None:
        return prices
    discount = comp.params.get("batch_discount", default)
    if isinstance(discount, bool) or not isinstance(discount, (int, float)) or not 0 <= discount <= 1:
        return prices  # the judge itself refuses the value, naming it
    keep = 1.0 - float(discount)
    return Prices(prices.input * keep, prices.output * keep,
                  None if prices.cached_input is None else prices.cached_input * keep,
                  f"{prices.source}, batch discount {discount:g}")


def component_prices(comp, book: dict[str, Prices]) -> Prices | None:
    if comp.prices is not None and not table_problems(comp.prices):
        return from_table(comp.prices, "sweep file")
    model = comp.params.get("model") if isinstance(comp.params.get("model"), str) else None
    for name in dict.fromkeys(n for n in (comp.display, model, comp.name) if n):
        if name in book:
            return book[name]
    p = comp.params
    if any(p.get(k) for k in _PARAM_PRICES):
        return Prices(float(p.get("price_prompt_per_m") or 0.0), float(p.get("price_completion_per_m") or 0.0),
                      None if p.get("price_cached_per_m") is None else float(p["price_cached_per_m"]),
                      "backend params (price_*_per_m)")
    return None
