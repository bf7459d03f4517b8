"""The judge backend of a command line: built from --judge, --judge-model, --base-url and --judge-option, every
mistake an exit-2 error naming the option, not a TypeError from a constructor.

A backend's constructor validates its config (adapters/openai_http.py HTTPConfig: `max_attempts=0`, no API key);
its ValueError/TypeError is the user's option value, so it becomes a UsageError naming the options given."""

from __future__ import annotations

from capeval.engine.errors import UsageError
from capeval.engine.params import REQUIRED, accepted_params, key_values
from capeval.engine.judging.backends import make_judge
from capeval.engine.registry import lookup
from capeval.engine.safetext import clip
from capeval.engine.secrets import is_secret_name, redact_urls
from capeval.engine.sweep.validation import constructor_problems, param_value_problems

#: constructor parameters with their own flag (make_judge offers --judge-model under any of these names)
_FLAGS = {"model": "--judge-model", "model_path": "--judge-model", "model_name": "--judge-model",
          "base_url": "--base-url"}


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
    return ", ".join(f"{k}={'***' if is_secret_name(k) else clip(redact_urls(v), 60)}" for k, v in options.items())


def build_judge(name: str, model: str | None, base_url: str | None, option_pairs: list[str]):
    """The judge backend for the command line, or a UsageError naming --judge, the flag or the --judge-option."""
    model, base_url, options = judge_options(model, base_url, option_pairs)
    try:
        factory = lookup("judge", name)
    except KeyError as exc:
        raise UsageError(f"--judge: {exc.args[0]}") from None
    offered = set(options) | ({"base_url"} if base_url is not None else set())
    if model is not None:
        offered |= {"model", "model_path", "model_name"}
    named, _ = accepted_params(factory)
    required = [n for n, default in named.items() if default is REQUIRED and n not in offered]
    if required:
        needed = ", ".join(_FLAGS.get(r, f"--judge-option {r}=…") for r in required)
        raise UsageError(f"--judge {name} needs {needed}")
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


