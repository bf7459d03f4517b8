"""DREAM-1K's AutoDQ as a benchmark of its own: the caption's events against the clip's reference events, entailed
in both directions -> per-clip, per-source and overall precision, recall and F1.

AutoDQ has ONE implementation, LVCap-Eval's `event_scoring = "autodq"` variant (engine/protocols/lvcap/); this
package reaches it at run time through the registry (`lookup("protocol", "lvcap")`: a benchmark package imports no
other) and delegates every request, parse, next step, stand-in answer and metric to it:

* official mode = lvcap's official mode with `event_scoring="autodq"`, the AutoDQ pack (`prompts`: autodq.toml)
  as its `event_prompts`: the official prompts byte for byte, no sampling parameters, 10 tries per call, a clip
  with a rejected reply Failed;
* strict mode = lvcap's strict event flow (capeval's pack, fenced texts, one entailment call per event).

What is its own is renamed: the requests' `protocol` column, the context task ("dream1k/events/<step>": the local
judge finds this protocol by that prefix, the judging loop calls this object), the protocol tag in the request
keys ("dream1k@<version>+lvcap@<lvcap's version>", so a change of either invalidates cached judgments), and the
metric names (F1, precision, recall: metrics.py). lvcap reads the name and the version from the protocol object it
runs on (`self.name`, `self.version`: the `protocol` column, the context task, the revision tag, in build_requests
and next_requests), so the delegate is lvcap's protocol object copied under this name; tests check every row.
"""

from .caption_prompts import CAPTION_PROMPTS as _CAPTION_PROMPTS

import copy as _copy
import json as _json

from capeval.engine.packs import PackError as _PackError, builtin_pack_path as _builtin_pack_path
from capeval.engine.packs import load_pack as _load_pack
from capeval.engine.packs import resolve_pack as _resolve_pack
from capeval.engine.params import Param as _Param
from capeval.engine.protocols.base import (CONFIDENCE_PARAM as _CONFIDENCE, MODE_PARAM as _MODE,
                                          PAPER_COMPATIBLE_PARAM as _PAPER_COMPATIBLE,
                                          JudgeProtocol as _JudgeProtocol)

from .implementation import IMPLEMENTATION as _IMPLEMENTATION, OFFICIAL_PACK as _OFFICIAL_PACK
from .implementation import implementation as _implementation
from .metrics import DURATION_EDGES_S as _DURATION_EDGES_S, check_duration_edges as _check_duration_edges
from .paired import paired_spec as _paired_spec


#: the prompt ids each mode renders from its pack (official: the AutoDQ pack's; strict: lvcap's strict event flow)
PACK_IDS = {"official": ("judge/extract_events", "judge/entailment"),
            "strict": ("judge/extract_list", "judge/entail_one")}


class Dream1kProtocol(_JudgeProtocol):
    """DREAM-1K (AutoDQ): events extracted from the caption, entailed against the reference and back.
    Params: mode, prompts (official: autodq.toml), confidence, paper_compatible, event_average (strict),
    duration_buckets (seconds)."""

    name = "dream1k"
    version = "1"
    caption_prompts = _CAPTION_PROMPTS
    intermediate_steps = ("extract",)
    headline = ("F1", "precision", "recall")
    metric_definitions = (
        ("F1", "2PR/(P+R) of the precision and recall below (official mode: of the means over sources), %"),
        ("precision", "the share of the caption's events the reference description entails (official mode: per "
                      "clip, mean per source, mean over sources), %"),
        ("recall", "the share of the reference events the caption entails (official mode: per clip, mean per "
                   "source, mean over sources), %"),
        ("F1_pooled", "official mode, labelled: F1 of all entailed events over all events, each direction"),
        ("F1_clip_mean", "official mode, labelled: the mean of the per-clip F1s"),
    )
    pack_params = ("prompts",)
    breakdowns = ("bucket",)  # source, subjects, shots, events, duration (metrics.py)
    dataset_kinds = ("dream1k", "dream1k_synthetic", "items")
    item_columns = ("annotation",)  # the reference events (JSON list); the reference description in `answer`
    tasks = ("events",)
    metrics_read_captions = False  # the verdict rows name the caption groups
    params = (_MODE, _Param("prompts", (str,), None, "the events pack: official mode the AutoDQ pack (autodq.toml), "
                                                     "strict mode capeval's LVCap-Eval pack by default"),
              _CONFIDENCE, _PAPER_COMPATIBLE,
              _Param("event_average", (str,), "video", "strict mode: video (per-clip P and R averaged) or pooled "
                     "(over all events)", choices=("video", "pooled"), metrics=True),
              _Param("duration_buckets", (list, str), None,
                     f"duration bucket edges in SECONDS, e.g. \"{','.join(f'{e:g}' for e in _DURATION_EDGES_S)}\" "
                     "(the default)", check=_check_duration_edges, metrics=True))

    @property
    def codes(self):
        return _implementation().codes

    def delegate(self) -> _JudgeProtocol:
        """lvcap's protocol object under this protocol's name and a version naming both (see the module doc)."""
        lvcap = _implementation()
        worker = _copy.copy(lvcap)
        worker.name = self.name
        worker.version = f"{self.version}+{_IMPLEMENTATION}@{lvcap.version}"
        return worker

    @staticmethod
    def implementation_params(mode: str = "strict", prompts=None) -> dict:
        """lvcap's params for a run of this protocol: its `prompts` is lvcap's `event_prompts` (no scene pack), and
        official mode scores events as AutoDQ."""
        params = {"mode": mode, "event_prompts": str(prompts) if prompts else None}
        if mode == "official":
            params["event_scoring"] = "autodq"
        return params

    def check_params(self, mode, params):
        """Beside the declared params: a `prompts` pack must hold the ids the mode renders (an LVCap-Eval pack given
        in official mode would fail only when the first request is rendered)."""
        problems = super().check_params(mode, params)
        if not params.get("prompts") or mode not in PACK_IDS or any(k == "prompts" for k, _ in problems):
            return problems
        try:
            pack = _load_pack(params["prompts"])
        except _PackError:
            return problems  # an unreadable pack file is reported by the caller's generic pack check
        missing = [i for i in PACK_IDS[mode] if not pack.has(i)]
        if missing:
            problems.append(("prompts", f"{mode} mode renders prompt ids {list(PACK_IDS[mode])}; the pack "
                                        f"{params['prompts']} lacks {missing}"
                                        + (" (the official pack is autodq.toml)" if mode == "official" else "")))
        return problems

    def packs_used(self, mode, params):
        prompts = params.get("prompts")
        if (mode or "strict") == "official":
            return {"prompts": _resolve_pack(self.name, prompts, mode="official", official_name=_OFFICIAL_PACK)}
        return {"prompts": _load_pack(prompts or _builtin_pack_path(_IMPLEMENTATION))}

    def paired_spec(self, mode):
        return _paired_spec(mode)

    def judging_policy(self, mode="strict", **params):
        return self.delegate().judging_policy(mode)

    def build_requests(self, items, captions, *, judge, judge_revision, seeds=(0,), mode="strict", prompts=None,
                       **opts):
        return self.delegate().build_requests(items, captions, judge=judge, judge_revision=judge_revision,
                                              seeds=seeds, **self.implementation_params(mode, prompts))

    def render(self, item, caption, *, seed, mode="strict", prompts=None, **opts):
        return self.delegate().render(item, caption, seed=seed, **self.implementation_params(mode, prompts))

    def next_requests(self, requests, verdicts, *, judge, judge_revision):
        return self.delegate().next_requests(requests, verdicts, judge=judge, judge_revision=judge_revision)

    def parse(self, request, text):
        return self.delegate().parse(request, text)

    def stand_in_answer(self, request):
        return self.delegate().stand_in_answer(request)

    def release_dataset_kind(self, path):
        """DREAM-1K's release file (`DREAM-1k.jsonl`: records with `vid`, `extra_info.events` and `messages`) is read
        as the `dream1k` kind."""
        return "dream1k" if _is_release_file(path) else None

    def cli_commands(self, subparsers, tools):
        from . import cli  # deferred: an extension (`capeval dream1k clips`), loaded by its hook

        cli.register(subparsers, tools)


def _is_release_file(path) -> bool:
    """Whether the first record of a .jsonl file has the release's fields (the rest is checked when it is loaded)."""
    if not path.is_file() or path.suffix.lower() != ".jsonl":
        return False
    try:
        with open(path, encoding="utf-8") as f:
            first = next((line for line in f if line.strip()), "")
        record = _json.loads(first)
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return (isinstance(record, dict) and {"vid", "extra_info", "messages"} <= set(record)
            and isinstance(record["extra_info"], dict) and "events" in record["extra_info"])


PROTOCOL = Dream1kProtocol()
