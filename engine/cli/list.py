"""`capeval list [WHAT]`: what a sweep file or a command can name: protocols, dataset kinds (with their
parameters), built-in caption prompts, judges and captioners (with the parameters their constructors accept)."""

from __future__ import annotations

import inspect

from capeval.engine.params import REQUIRED, accepted_params
from capeval.engine.prompts_library import builtin_prompts
from capeval.engine.registry import lookup, names
from capeval.engine.sweep.validation import constructor_params

SECTIONS = ("protocols", "kinds", "prompts", "judges", "captioners")


def register(sub) -> None:
    p = sub.add_parser("list", help="list protocols, dataset kinds, prompts, judges and captioners")
    p.add_argument("what", nargs="?", choices=SECTIONS, help="one section (default: all)")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.set_defaults(func=run)


def _first_line(obj) -> str:
    """The first paragraph of obj's OWN docstring, on one line (an inherited base-class doc says nothing)."""
    doc = inspect.cleandoc(obj.__dict__.get("__doc__") or "") if isinstance(obj, type) else inspect.getdoc(obj) or ""
    return " ".join(doc.split("\n\n")[0].split())


def _default(v) -> str:
    return "required" if v is REQUIRED else f"default {v!r}"


def protocols() -> list[str]:
    out = []
    for n in names("protocol"):
        p = lookup("protocol", n)
        import sys

        about = _first_line(type(p)) or _first_line(sys.modules.get(type(p).__module__))
        out.append(f"  {n:<14} v{getattr(p, 'version', '?'):<4} {about[:110]}")
        for param in getattr(p, "params", None) or ():  # its declaration (engine/params.py): any other name is refused
            out.append(f"      {param.name:<18} {param.valid()[:40]:<40} default {param.default!r}: {param.doc}")
    out.append("  params: sweep protocols[].params, or --mode/--prompts/--param; a name a protocol does not list is "
               "an error")
    return out


def kinds() -> list[str]:
    out = []
    for n in names("dataset_kind"):
        k = lookup("dataset_kind", n)
        out.append(f"  {n:<14} {' '.join(k.doc.split()).split(': ', 1)[-1]}")
        for p in k.params:
            need = "required" if p.required else "optional"
            out.append(f"      {p.name:<12} {'/'.join(t.__name__ for t in p.types):<10} {need:<8} {p.doc}")
    out.append("  every kind also takes: name (required), kind, limit = N (the first N videos)")
    return out


def prompts() -> list[str]:
    out = []
    for pid, p in builtin_prompts().items():
        media = "image+video" if p.image_text else "any"
        flags = " (segmental)" if p.segmental else ""
        out.append(f"  {pid:<22} {media:<12} {p.source}{flags}")
    out.append("  own prompts: [[prompts]] id + text (+ image), id + file, or id + pack + video/image prompt ids")
    return out


def _components(kind: str) -> list[str]:
    """Each judge or captioner with its declared params (engine/params.py): name, default, valid values and what it
    is; the fields of its config (HTTP backends) with their defaults."""
    out = []
    for n in names(kind):
        cls = lookup(kind, n)
        params, open_ended = accepted_params(cls)
        declared = constructor_params(cls)
        out.append(f"  {n:<10} {_first_line(cls)[:100]}")
        if not params:
            out.append("      params: " + ("any (not declared)" if open_ended else "none"))
        for k, default in params.items():
            p = declared.get(k)
            valid = f"; {p.valid()}" if p is not None and p.types else ""
            doc = f": {p.doc}" if p is not None and p.doc else ""
            out.append(f"      {k} ({_default(default)}{valid}){doc}")
        if open_ended and params:
            out.append("      + backend options passed through")
    return out


def run(args) -> int:
    sections = {"protocols": protocols, "kinds": kinds, "prompts": prompts,
                "judges": lambda: _components("judge"), "captioners": lambda: _components("captioner")}
    titles = {"protocols": "protocols", "kinds": "dataset kinds ([[datasets]] kind = ...)",
              "prompts": "caption prompts (built in)", "judges": "judges ([[judges]] name = ..., --judge)",
              "captioners": "captioners ([[captioners]] name = ...)"}
    for name in ([args.what] if args.what else SECTIONS):
        print(f"{titles[name]}:")
        for line in sections[name]():
            print(line)
        print()
    return 0
