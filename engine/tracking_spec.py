"""Where a run is logged (`[options] tracking`, `capeval export --to`): the tracker and its settings, and what is
wrong with them. It sits below the sweep-file parser and the tracking module (engine/report/tracking.py) that both
use it; it imports neither tracker (engine/report/tracking.py does, when it logs)."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, fields, replace
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from capeval.engine.secrets import is_secret_name, is_url_secret_param

TRACKERS = ("mlflow", "wandb")
WANDB_MODES = ("online", "offline")
#: which tracker each setting of a TrackingSpec belongs to
SETTING_TRACKER = {"uri": "mlflow", "experiment": "mlflow", "project": "wandb", "entity": "wandb", "mode": "wandb",
                   "dir": "wandb"}
#: the W&B project when none is given
DEFAULT_PROJECT = "capeval"


@dataclass(frozen=True)
class TrackingSpec:
    """Where a run is logged: `to` names the tracker; the other fields are that tracker's settings (None: its own
    default)."""

    to: str
    uri: str | None = None  # mlflow: tracking URI (default: $MLFLOW_TRACKING_URI, else the file store ./mlruns)
    experiment: str | None = None  # mlflow: experiment name (default: the sweep's name)
    project: str | None = None  # wandb: project (default: "capeval")
    entity: str | None = None  # wandb: team or user (default: the API key's default entity)
    mode: str | None = None  # wandb: "online" or "offline" (default: W&B's own: $WANDB_MODE, else online)
    dir: str | None = None  # wandb: folder for its local files (default: W&B's own: $WANDB_DIR, else ./wandb)

    def resolved(self, base: Path) -> TrackingSpec:
        """The spec with a relative file-store path (`uri`) and `dir` taken relative to `base` (a sweep file's
        folder, or the working directory for `capeval export`)."""
        uri = self.uri
        if uri is not None and is_file_store(uri):
            path = Path(file_store_path(uri)).expanduser()
            uri = (path if path.is_absolute() else (base / path).resolve()).as_uri()
        folder = self.dir
        if folder is not None:
            path = Path(folder).expanduser()
            folder = str(path if path.is_absolute() else (base / path).resolve())
        return replace(self, uri=uri, dir=folder)


#: key -> (the types a sweep file may write, required) of `[options] tracking` as a table
SPEC_KEYS = {f.name: (str, f.name == "to") for f in fields(TrackingSpec)}


def extra_missing(tracker: str) -> str | None:
    """The install line when the tracker's library is missing (found without importing it), else None."""
    if importlib.util.find_spec(tracker) is None:
        return f"{tracker} is not installed, an optional extra of capeval: pip install 'capeval[{tracker}]'"
    return None


def spec_problems(spec: TrackingSpec) -> list[tuple[str, str]]:
    """(setting, why) for each problem of `spec`: an unknown tracker, another tracker's setting, a W&B mode, a URI
    holding credentials, the tracker's extra missing. Empty when it can be used."""
    if spec.to not in TRACKERS:
        return [("to", f"must be one of {', '.join(map(repr, TRACKERS))}, got {spec.to!r}")]
    problems = []
    for name, tracker in SETTING_TRACKER.items():
        if getattr(spec, name) is not None and tracker != spec.to:
            problems.append((name, f"is a setting of {tracker}, not of {spec.to}"))
    if spec.mode is not None and spec.mode not in WANDB_MODES:
        problems.append(("mode", f"must be one of {', '.join(map(repr, WANDB_MODES))}, got {spec.mode!r}"))
    if spec.uri is not None and (why := uri_credentials(spec.uri)):
        problems.append(("uri", why))
    for name in ("experiment", "project", "entity"):
        if getattr(spec, name) is not None and not getattr(spec, name).strip():
            problems.append((name, "must not be empty"))
    if missing := extra_missing(spec.to):
        problems.append(("to", missing))
    return problems


def uri_credentials(uri: str) -> str | None:
    """Why `uri` may not be written down: it holds a user name, password or key (they belong in the tracker's
    environment variables); None when it holds none."""
    parts = urlsplit(uri)
    secret_query = [k for k, _ in parse_qsl(parts.query) if is_secret_name(k) or is_url_secret_param(k)]
    if parts.username or parts.password or secret_query:
        return ("holds credentials; give them in MLflow's environment variables instead (MLFLOW_TRACKING_TOKEN, or "
                "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD)")
    return None


def is_file_store(uri: str) -> bool:
    """A bare path, or a file: URI: MLflow's local file store."""
    scheme = urlsplit(uri).scheme
    return scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt")  # a bare path, or file:


def file_store_path(uri: str) -> str:
    parts = urlsplit(uri)
    return parts.path if parts.scheme == "file" else uri
