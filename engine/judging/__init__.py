"""Judging: sending rendered requests to a judge through the judgment cache, parsing, re-asking, multi-step flows."""


def __getattr__(name):  # keep `engine.judging.repair` importable from protocol parsers without loading the runner
    if name in ("run_judging", "JudgingSummary"):
        from . import runner

        return getattr(runner, name)
    raise AttributeError(name)
