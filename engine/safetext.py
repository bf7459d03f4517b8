"""Untrusted text shown on a terminal: item ids, captions, replies and file contents are printed escaped.

A string from a dataset or a judge may hold ANSI/OSC escape sequences (which can rewrite the screen, set the window
title or plant hyperlinks), carriage returns that overwrite a line, or other control characters. `for_terminal`
renders every such character visibly (`\\x1b`, `\\r`, `\\u202e`) and leaves ordinary text, tabs excepted, as it
is; `clip` bounds a long string for a one-line message. Hand-written: the standard library's `repr` also quotes and
escapes non-ASCII letters, which would make every non-English id unreadable.
"""

from __future__ import annotations

import unicodedata

#: Unicode categories shown escaped: controls, format characters (bidi overrides, zero-width joiners), separators
#: other than the plain space, surrogates, private use and unassigned code points
_ESCAPED_CATEGORIES = {"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"}


def _escape(ch: str) -> str:
    code = ord(ch)
    if ch == "\n":
        return "\\n"
    if ch == "\r":
        return "\\r"
    if ch == "\t":
        return "\\t"
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def for_terminal(value: object, *, keep_newlines: bool = False) -> str:
    """`value` as text safe to print: control and format characters escaped (newlines kept if asked)."""
    text = value if isinstance(value, str) else str(value)
    if text.isprintable() and "\\" not in text:
        return text
    out = []
    for ch in text:
        if ch == "\n" and keep_newlines:
            out.append(ch)
        elif ch == "\\":
            out.append("\\\\")
        elif ch == " " or (ch.isprintable() and unicodedata.category(ch) not in _ESCAPED_CATEGORIES):
            out.append(ch)
        else:
            out.append(_escape(ch))
    return "".join(out)


def clip(value: object, limit: int = 120) -> str:
    """for_terminal(value), cut to `limit` characters with an ellipsis and the full length."""
    text = for_terminal(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text)} chars)"
