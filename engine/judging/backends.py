"""Constructing a registered judge backend by name from CLI-style options (model, base URL, extra kwargs)."""

from __future__ import annotations

from capeval.engine.params import accepted_params
from capeval.engine.registry import lookup


def make_judge(name: str, *, model: str | None = None, base_url: str | None = None, **kwargs):
    """lookup("judge", name) and call it with the options it declares (engine/params.py; `model` is also offered as
    `model_path`/`model_name`); an option the backend does not declare is an error naming it."""
    factory = lookup("judge", name)
    named, open_ended = accepted_params(factory)
    options = dict(kwargs)
    if model is not None:
        key = next((k for k in ("model", "model_path", "model_name") if k in named), "model")
        options[key] = model
    if base_url is not None:
        options["base_url"] = base_url
    if not open_ended:
        unknown = sorted(k for k in options if k not in named)
        if unknown:
            raise ValueError(f"judge {name!r} does not take option(s) {unknown}; it takes {sorted(named)}")
    return factory(**options)
