"""Warnings that repeat: one line per kind, with how many subjects it concerns and a few of them.

A 16-system leaderboard gave 33 near-identical lines ("<system>: <metric> has a degenerate interval ...") before
anything else. Whatever collects warnings -- a leaderboard, the Python `warnings` a command raises -- adds each as
(kind, subject) to a `WarningGroups`, and prints `lines()`: a kind met once reads "<kind>: <subject>", a kind met N
times "<kind>: N times, e.g. a; b; c and N-3 more". `capture_python_warnings` routes the
`warnings` module of a whole command through one: the command's own warnings are printed grouped when it ends;
libraries' deprecation chatter (and any warning raised from outside capeval's packages) is only counted, and shown
with `--verbose`.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings

#: how many subjects a grouped line names
EXAMPLES = 3


class WarningGroups:
    def __init__(self) -> None:
        self._count: dict[str, int] = {}
        self._subjects: dict[str, dict[str, None]] = {}  # distinct subjects per kind, in order

    def add(self, kind: str, subject: str = "") -> None:
        """One warning: what is wrong (`kind`, the same text for every subject it concerns) and about what."""
        self._count[kind] = self._count.get(kind, 0) + 1
        if subject:
            self._subjects.setdefault(kind, {})[subject] = None

    def __len__(self) -> int:
        return sum(self._count.values())

    def lines(self, examples: int = EXAMPLES) -> list[str]:
        out = []
        for kind, n in self._count.items():
            named = list(self._subjects.get(kind, ()))
            if not named:
                out.append(kind + (f" (x{n})" if n > 1 else ""))
            elif n == 1:
                out.append(f"{kind}: {named[0]}")
            else:
                more = f" and {len(named) - examples} more" if len(named) > examples else ""
                out.append(f"{kind}: {n} times, e.g. {'; '.join(named[:examples])}{more}")
        return out


#: where capeval's own code lives: a warning raised from anywhere else is a library's
_OWN_ROOTS = tuple(os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep + name + os.sep
                   for name in ("engine", "adapters", "benchmarks", "kernels", "cluster"))
_LIBRARY_CATEGORIES = (DeprecationWarning, PendingDeprecationWarning, FutureWarning, ImportWarning, ResourceWarning)


@contextlib.contextmanager
def capture_python_warnings(verbose: bool = False, stream=None):
    """Within: Python warnings are collected instead of printed as they come (file, line and source line each);
    at the end, capeval's own are printed grouped (`warning: ...`), libraries' are counted in one line (all shown,
    grouped, when `verbose`)."""
    own, library = WarningGroups(), WarningGroups()

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        text = str(message).strip().splitlines()[0] if str(message).strip() else category.__name__
        mine = str(filename).startswith(_OWN_ROOTS) and not issubclass(category, _LIBRARY_CATEGORIES)
        (own if mine else library).add(f"{category.__name__}: {text}" if not mine else text)

    previous = warnings.showwarning
    warnings.showwarning = show
    try:
        yield own
    finally:
        warnings.showwarning = previous
        out = stream if stream is not None else sys.stderr
        for line in own.lines():
            print(f"warning: {line}", file=out)
        if verbose:
            for line in library.lines():
                print(f"library warning: {line}", file=out)
        elif len(library):
            print(f"({len(library)} library warnings not shown; --verbose shows them)", file=out)
