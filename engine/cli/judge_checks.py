"""Checks of `capeval judge`'s command line that need the loaded inputs or the judge registry: the judge backend
built from --judge, --judge-model, --base-url and --judge-option (every mistake an exit-2 error naming the option,
not a TypeError from a constructor), and that the captions match at least one item.

A backend's constructor validates its config (adapters/openai_http.py HTTPConfig: `max_attempts=0`, no API key);
its ValueError/TypeError is the user's option value, so it becomes a UsageError naming the options given."""

from __future__ import annotations

import inspect
import json

from capeval.engine.errors import UsageError
from capeval.engine.safetext import clip
from capeval.engine.secrets import redact_urls

#: constructor parameters with their own flag (make_judge offers --judge-model under any of these names)
_FLAGS = {"model": "--judge-model", "model_path": "--judge-model", "model_name": "--judge-model",
          "base_url": "--base-url"}


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


def judge_options(model: str | None, base_url: str | None, option_pairs: list[str]) -> tuple[str | None, str | None,
                                                                                               dict]:
    """(model, base_url, other options): `--judge-option model=X` / `base_url=X` mean --judge-model / --base-url
    (make_judge took them twice before: always a TypeError); both spellings at once is an error."""
    options = key_values(option_pairs, "--judge-option")
    given = {"model": model, "base_url": base_url}
    for key, flag in (("model", "--judge-model"), ("base_url", "--base-url")):
        if key in options:
            if given[key] is not None:
                raise UsageError(f"--judge-option {key}= and {flag} both given; use one of them")
            given[key] = None if options[key] is None else str(options.pop(key))
    return given["model"], given["base_url"], options


def _shown(options: dict) -> str:
    """The options as the user wrote them, credentials blanked (the message may end up in a log)."""
    from capeval.engine.secrets import is_secret_name

    return ", ".join(f"{k}={'***' if is_secret_name(k) else clip(redact_urls(v), 60)}" for k, v in options.items())


def build_judge(name: str, model: str | None, base_url: str | None, option_pairs: list[str]):
    """The judge backend for the command line, or a UsageError naming --judge, the flag or the --judge-option."""
    from capeval.engine.judging.backends import make_judge
    from capeval.engine.registry import lookup

    model, base_url, options = judge_options(model, base_url, option_pairs)
    try:
        factory = lookup("judge", name)
    except KeyError as exc:
        raise UsageError(f"--judge: {exc.args[0]}") from None
    offered = set(options) | ({"base_url"} if base_url is not None else set())
    if model is not None:
        offered |= {"model", "model_path", "model_name"}
    required = [p.name for p in inspect.signature(factory).parameters.values()
                if p.default is inspect.Parameter.empty and p.name not in offered
                and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]
    if required:
        needed = ", ".join(_FLAGS.get(r, f"--judge-option {r}=…") for r in required)
        raise UsageError(f"--judge {name} needs {needed}")
    from capeval.engine.sweep.validation import constructor_problems, param_value_problems

    # names and values checked as a sweep's judges[].params are, before the backend starts (an engine, a connection)
    problems = [m for m in constructor_problems(factory, options, f"--judge {name}") if " needs " not in m]
    problems += [f"--judge-option {k}: {m}" if k else m for k, m in param_value_problems(factory, options)]
    if problems:
        raise UsageError("; ".join(problems))
    try:
        return make_judge(name, model=model, base_url=base_url, **options)
    except (ValueError, TypeError, FileNotFoundError) as exc:  # the config's own checks: the user's values
        given = [f"--judge-model {clip(model, 60)}"] if model is not None else []
        given += [f"--base-url {clip(redact_urls(base_url), 80)}"] if base_url is not None else []
        given += [f"--judge-option {_shown(options)}"] if options else []
        raise UsageError(f"--judge {name}" + (f" ({'; '.join(given)})" if given else "")
                         + f": {exc}") from None


def check_pairs(items, captions, source) -> None:
    """A UsageError when no caption matches any item (captions match by item_id, then video_id), with a few ids
    from each side: judging would only produce rows without a verdict, and a rerun could not change that."""
    if captions is None:
        return
    item_ids = set(items.column("item_id").to_pylist()) | set(items.column("video_id").to_pylist())
    caption_ids = list(dict.fromkeys(captions.column("video_id").to_pylist()))
    if any(c in item_ids for c in caption_ids):
        return

    def some(values) -> str:
        values = list(dict.fromkeys(values))
        more = f" (+{len(values) - 3} more)" if len(values) > 3 else ""
        return ", ".join(f"'{clip(v, 60)}'" for v in values[:3]) + more

    videos, ids = items.column("video_id").to_pylist(), items.column("item_id").to_pylist()
    item_side = f"video_id {some(videos)}" + (f", item_id {some(ids)}" if ids != videos else "")
    raise UsageError(f"{source}: no (item, caption) pair matched (captions match items by item_id, then video_id, then media file): "
                     f"items have {item_side}; captions have {some(caption_ids)}")
