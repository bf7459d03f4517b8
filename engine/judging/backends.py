"""Constructing a registered judge backend by name from CLI-style options (model, base URL, extra kwargs)."""

from __future__ import annotations

import inspect


def make_judge(name: str, *, model: str | None = None, base_url: str | None = None, **kwargs):
    """lookup("judge", name) and call it with the options its signature accepts (`model` is also offered as
    `model_path`/`model_name`); an option the backend cannot take is an error naming it."""
    from capeval.engine.registry import lookup

    factory = lookup("judge", name)
    params = inspect.signature(factory).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    options = dict(kwargs)
    if model is not None:
        key = next((k for k in ("model", "model_path", "model_name") if k in params), "model")
        options[key] = model
    if base_url is not None:
        options["base_url"] = base_url
    if not takes_any:
        unknown = sorted(k for k in options if k not in params)
        if unknown:
            raise ValueError(f"judge {name!r} does not take option(s) {unknown}; it takes {sorted(params)}")
    return factory(**options)
