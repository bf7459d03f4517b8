"""Judging: sending rendered requests to a judge through the judgment cache, parsing, re-asking, multi-step flows."""
