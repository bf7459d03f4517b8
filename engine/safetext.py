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


def terminal_text(text: str) -> str:
    """`text` with every line that holds control or format characters escaped: messages and tables carry ids,
    captions and file contents, which may hold escape sequences. Printable lines stay as they are, so the
    backslashes of an id that a message already shows with repr() are not doubled."""
    return "\n".join(line if line.isprintable() else for_terminal(line) for line in text.split("\n"))


def clip(value: object, limit: int = 120) -> str:
    """for_terminal(value), cut to `limit` characters with an ellipsis and the full length."""
    text = for_terminal(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text)} chars)"


def for_stream(text: str, *, keep_carriage_return: bool = False) -> str:
    """`text` about to be written to a terminal stream: every control and format character escaped as `for_terminal`
    does, except newlines and tabs (and carriage returns when asked: a progress bar redraws its line with them).
    Backslashes are left as they are: a stream is written in pieces, and text a writer already escaped must not
    have its escapes doubled."""
    if text.replace("\n", "").isprintable():
        return text
    out = []
    for ch in text:
        if ch in "\n\t" or (ch == "\r" and keep_carriage_return) or ch == " " or (
                ch.isprintable() and unicodedata.category(ch) not in _ESCAPED_CATEGORIES):
            out.append(ch)
        else:
            out.append(_escape(ch))
    return "".join(out)


class TerminalStream:
    """A text stream (stdout, stderr) whose every write goes through `for_stream`: whatever a command prints -- its
    tables, warnings, progress lines, a library's log line -- reaches the terminal without raw escape sequences,
    whichever code printed it. Everything else (fileno, isatty, encoding, buffer, ...) is the wrapped stream's."""

    def __init__(self, stream):
        self.wrapped = stream
        try:
            self._keep_cr = bool(stream.isatty())  # a terminal bar redraws with \r; in a log file \r only hides
        except (AttributeError, ValueError):
            self._keep_cr = False

    def write(self, text: str) -> int:
        self.wrapped.write(for_stream(text, keep_carriage_return=self._keep_cr))
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str):
        return getattr(self.wrapped, name)


def guard_terminal_streams():
    """Wrap sys.stdout and sys.stderr in TerminalStream (once); returns a function that puts the previous ones back."""
    import sys

    previous = sys.stdout, sys.stderr
    if not isinstance(sys.stdout, TerminalStream):
        sys.stdout = TerminalStream(sys.stdout)
    if not isinstance(sys.stderr, TerminalStream):
        sys.stderr = TerminalStream(sys.stderr)

    def restore() -> None:
        sys.stdout, sys.stderr = previous

    return restore


def json_for_terminal(value, **dumps_kwargs) -> str:
    """`value` as JSON for a terminal: non-ASCII letters stay readable (ensure_ascii=False), while every character
    `for_terminal` would escape is written as a JSON \\uXXXX escape -- so the text parses back unchanged and the stream
    escaping (TerminalStream) has nothing left to change in it."""
    import json

    text = json.dumps(value, ensure_ascii=False, **dumps_kwargs)
    if text.replace("\n", "").isprintable():
        return text
    out = []
    for ch in text:
        if ch == "\n" or ch == " " or (ch.isprintable() and unicodedata.category(ch) not in _ESCAPED_CATEGORIES):
            out.append(ch)
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:  # a UTF-16 surrogate pair, as JSON writes characters beyond the BMP
            code = ord(ch) - 0x10000
            out.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
    return "".join(out)
