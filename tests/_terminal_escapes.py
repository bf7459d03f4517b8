"""Hostile terminal text for the tests that check no command prints raw escape sequences."""

from __future__ import annotations

#: OSC (set the window title, ended by BEL), SGR colour, a C1 CSI that clears the screen, an ESC-CSI one
HOSTILE = "\x1b]0;pwned\x07\x1b[31mRED\x9b2J\x1b[2J"
RAW = ("\x1b", "\x07", "\x9b")


def assert_escaped(captured, command: str, expect_visible: bool = True) -> str:
    """`captured` (text, or pytest's captured out/err) holds none of the RAW bytes; with `expect_visible`, the
    hostile text is there, escaped."""
    text = captured if isinstance(captured, str) else captured.out + captured.err
    for raw in RAW:
        assert raw not in text, f"{command}: raw {raw!r} on the terminal:\n{text[:3000]}"
    if expect_visible:
        assert "\\x1b]0;pwned\\x07" in text, f"{command}: the hostile label is not shown (escaped):\n{text[:3000]}"
    return text
