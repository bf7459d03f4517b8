"""`JudgeProtocol`: what every judged protocol provides (lm-eval style: a name and a version that enters every key).

A protocol renders judge requests from items x captions (`build_requests`), turns one judge output into a verdict
code (`parse`), builds the next step's requests for multi-step flows (`next_requests`: answer -> score, extract ->
entail), and delegates metrics to its `metrics` module.

Request tables have the columns of `capeval.engine.schemas.JUDGE_REQUESTS` plus one trailing `context` column (JSON text,
see REQUESTS_WITH_CONTEXT): a `RequestContext` -- what the parser and the next step need (the correct letter, the
reference answer), the `fields`/`task` a structured backend answers from (capeval.adapters.base.JudgeRequest), the
frames path for multimodal judges and the sampling temperature. `RequestContext.encode` writes the column's text and
`RequestContext.decode` reads it back; nothing else parses it. `conform(table, JUDGE_REQUESTS)` drops the column when
only the public columns are wanted.
"""

from __future__ import annotations

import enum
import importlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Iterable, Protocol, Sequence

import pyarrow as pa

from capeval.engine.datasets.video_ids import with_dataset_video_ids
from capeval.engine.errors import UsageError
from capeval.engine.inputs import read_captions
from capeval.engine.keys import content_key, derived_seed, protocol_tag, request_key, tagged_revision
from capeval.engine.params import Param, param_problems
from capeval.engine.prompts_library import CaptionPrompt
from capeval.engine.schemas import JUDGE_REQUESTS, ParseStatus
from capeval.engine.stand_in import StandIn, StandInRequest

if TYPE_CHECKING:  # typing only: a protocol package imports polars and numpy itself where it uses them
    import numpy as np
    import polars as pl

REQUESTS_WITH_CONTEXT = JUDGE_REQUESTS.append(pa.field("context", pa.string()))
#: Sort order that puts requests sharing a caption (and so a prompt prefix) next to each other.
REQUEST_ORDER = [("caption_key", "ascending"), ("item_id", "ascending"), ("step", "ascending"),
                 ("sub_index", "ascending"), ("trial", "ascending")]
REASK_TEMPERATURE = 0.7  # a re-ask at temperature 0 would repeat the same malformed answer
_ITEM_SLICE = 4096  # item rows made into dicts at a time (JudgeProtocol.items_problems)

# Parameters several protocols share (each protocol lists the ones it reads in `JudgeProtocol.params`).
MODE_PARAM = Param("mode", (str,), "strict", "strict (capeval's rules) or official (the benchmark's scripts' rules)",
                   choices=("strict", "official"), metrics=True)
PROMPTS_PARAM = Param("prompts", (str,), None, "a prompt pack file (TOML); default: the mode's pack")
CONFIDENCE_PARAM = Param("confidence", (float,), 0.95, "level of the bootstrap confidence intervals",
                         low=0, high=1, low_open=True, high_open=True, metrics=True)
PAPER_COMPATIBLE_PARAM = Param("paper_compatible", (bool,), False,
                               "leave rows without a verdict out of denominators, as the official scripts do",
                               metrics=True)


def _empty_rows(items: pa.Table, column: str) -> pa.Array:
    """Indices of the rows whose `column` is missing, null, an empty string or an empty list, found on the column
    (a Python list of 100,000 items' options was ~50 MB at the peak of a sweep's checks)."""
    import pyarrow.compute as pc

    if column not in items.column_names:
        return pa.array(range(items.num_rows), pa.int64())
    values = items.column(column)
    if pa.types.is_string_view(values.type):  # (a polars table's strings) no length kernel for views
        values = values.cast(pa.large_string())
    empty = pc.is_null(values)
    kind = values.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        empty = pc.or_(empty, pc.equal(pc.utf8_length(values), 0))
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        empty = pc.or_(empty, pc.equal(pc.list_value_length(values), 0))
    return pc.indices_nonzero(pc.fill_null(empty, True))


def _temperature(value) -> None:
    if value is None or value == "none":
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 2:
        raise ValueError(f"expected a temperature from 0 to 2, or null/\"none\" (send none), got {value!r}")


TEMPERATURE_PARAM = Param("temperature", (), None, "sampling temperature sent to the judge (null or \"none\": send "
                          "none); default: the mode's", check=_temperature, metrics=True)


@dataclass(frozen=True)
class JudgingPolicy:
    """How the judge loop treats malformed answers for one protocol run (protocol.judging_policy(**params)).

    strict mode (capeval's own): up to `max_reasks` re-asks at `reask_temperature` (a re-ask at temperature 0 would
    repeat the same malformed answer). official mode mirrors the official code: re-asks are the same request again
    (`reask_temperature=None`: sampling unchanged), and `stop_when_failed_at_most` reproduces scripts that stop their
    retry rounds once at most that many items are still unanswered (e.g. 5) -- items still failed then are
    kept as rows without a verdict (status FAILED/ERROR) and counted in n_no_verdict, never dropped from the table.
    """

    max_reasks: int = 2
    reask_temperature: float | None = REASK_TEMPERATURE
    stop_when_failed_at_most: int | None = None
    mode: str = "strict"


@dataclass(frozen=True)
class RequestContext:
    """What a request row carries beyond its public columns, stored as the `context` column's JSON text.

    `task` is "protocol/task/step"; `fields` are what a structured backend answers from (and the untrusted texts a
    parser must not take for an answer); `parse` is the protocol's own record for its parser and next step (the
    correct letter, the reference answer, `missing` when the row is finished without asking). `frames_path` /
    `images_digest`: the frames a multimodal judge sees. `temperature` None: none sent; `send_seed` False: no seed
    sent. The text leaves out what is at its default (no frames, temperature 0, seed sent), so the stored text of
    every existing request stays as it was."""

    task: str = ""
    fields: dict[str, Any] = field(default_factory=dict)
    parse: dict[str, Any] = field(default_factory=dict)
    frames_path: str | None = None
    images_digest: str | None = None
    temperature: float | None = 0.0
    send_seed: bool = True

    @property
    def missing(self) -> str | None:
        """Why the row is finished without asking the judge (no caption, an earlier step failed), or None."""
        return self.parse.get("missing")

    def encode(self) -> str:
        text: dict[str, Any] = {"task": self.task, "fields": self.fields, "parse": self.parse}
        if self.frames_path:
            text["frames_path"] = self.frames_path
            text["images_digest"] = self.images_digest
        if self.temperature is None or self.temperature:
            text["temperature"] = self.temperature  # absent = 0.0; null = none sent
        if not self.send_seed:
            text["send_seed"] = False  # absent = sent
        return json.dumps(text, ensure_ascii=False, sort_keys=True)

    @classmethod
    def decode(cls, text: str | None) -> "RequestContext":
        """The context of a stored `context` value (None or empty: the defaults)."""
        if not text:
            return cls()
        value = json.loads(text)
        return cls(task=value.get("task") or "", fields=value.get("fields") or {}, parse=value.get("parse") or {},
                   frames_path=value.get("frames_path"), images_digest=value.get("images_digest"),
                   temperature=value.get("temperature", 0.0), send_seed=value.get("send_seed") is not False)


@dataclass
class Rendered:
    """One rendered request before keying (what a protocol's prompts module produces)."""

    task: str
    step: str
    user: str
    system: str | None = None
    sub_index: int = 0
    choices: tuple[str, ...] | None = None
    json_schema: str | None = None
    # Output limit; None = send none (the API's default: until the model stops), as official scripts that set none.
    max_tokens: int | None = 256
    fields: dict[str, str] = field(default_factory=dict)  # what a structured backend answers from
    parse: dict[str, Any] = field(default_factory=dict)  # what the parser / next step needs
    images_digest: str | None = None
    frames_path: str | None = None
    # Sampling temperature; None = send none (the server's default), as official scripts that set no sampling do.
    temperature: float | None = 0.0
    # Whether the judge seed is sent with the request; False as official scripts that send none (a re-ask is then a
    # fresh sample, as their retries are). The seed still enters the key, so judge trials stay separate draws.
    send_seed: bool = True


def make_row(r: Rendered, base: dict, *, protocol: str, judge: str, judge_revision: str, seed: int, trial: int,
             temperature: float | None = ...) -> dict:
    """A REQUESTS_WITH_CONTEXT row for `r`, keyed by content. `base` holds item/caption identity columns.
    `temperature` overrides r.temperature when given (None = no temperature sent)."""
    if temperature is ...:
        temperature = r.temperature
    key = request_key(judge, judge_revision, system=r.system, user=r.user, images_digest=r.images_digest,
                      choices=r.choices, json_schema=r.json_schema, max_tokens=r.max_tokens,
                      temperature=temperature, seed=seed, send_seed=r.send_seed)
    context = RequestContext(task=f"{protocol}/{r.task}/{r.step}", fields=r.fields, parse=r.parse,
                             frames_path=r.frames_path or None,
                             images_digest=r.images_digest if r.frames_path else None, temperature=temperature,
                             send_seed=r.send_seed)
    return {
        **base, "request_key": key, "protocol": protocol, "task": r.task, "step": r.step, "sub_index": r.sub_index,
        "system": r.system, "user": r.user, "choices": list(r.choices) if r.choices else None,
        "json_schema": r.json_schema, "max_tokens": r.max_tokens, "seed": int(seed), "trial": int(trial),
        "context": context.encode(),
    }


def rows_to_table(rows: list[dict]) -> pa.Table:
    if not rows:
        return REQUESTS_WITH_CONTEXT.empty_table()
    cols = {f.name: pa.array([r.get(f.name) for r in rows], type=f.type) for f in REQUESTS_WITH_CONTEXT}
    return pa.Table.from_pydict(cols, schema=REQUESTS_WITH_CONTEXT).sort_by(REQUEST_ORDER)


def keys_per_pair_when_sampled(table: pa.Table, tag: str) -> pa.Table:
    """Request keys for a protocol that asks once per (item, caption) pair, as official scripts that make one call
    per pair do: when the judge samples (a temperature above 0, or none sent), two pairs whose prompts happen to be
    equal are two separate draws, so their keys include the pair (item and caption, under `tag`). At temperature 0
    equal prompts share one cached judgment."""
    if table.num_rows == 0:
        return table
    rows = table.to_pylist()
    changed = False
    for r in rows:
        temperature = RequestContext.decode(r["context"]).temperature
        if temperature is None or temperature > 0:
            r["request_key"] = content_key(tag, r["request_key"], r["item_id"], r["caption_key"])
            changed = True
    return rows_to_table(rows) if changed else table


def caption_identity(caption: dict) -> dict:
    return {k: caption.get(k) for k in ("caption_key", "captioner", "prompt_id", "frame_spec")}


def _captions_by_video(captions: pa.Table) -> dict[str, list[dict]]:
    by_video: dict[str, list[dict]] = {}
    for cap in captions.to_pylist():
        by_video.setdefault(cap["video_id"], []).append(cap)
    return by_video


def _captions_of(item: dict, by_video: dict[str, list[dict]]) -> list[dict]:
    return by_video.get(item["item_id"]) or by_video.get(item["video_id"]) or []


def pair_items_captions(items: pa.Table, captions: pa.Table) -> list[tuple[dict, dict]]:
    """(item, caption) pairs: a caption whose video_id equals the item's item_id (per-item captions, as a protocol
    that captions each item has them) wins; otherwise every caption of the item's video."""
    by_video = _captions_by_video(captions)
    return [(item, cap) for item in items.to_pylist() for cap in _captions_of(item, by_video)]


def count_uncaptioned_items(items: pa.Table, captions: pa.Table) -> int:
    """How many items pair_items_captions pairs with no caption (they get no request)."""
    by_video = _captions_by_video(captions)
    return sum(1 for item in items.to_pylist() if not _captions_of(item, by_video))


def annotation_value(item: dict) -> Any:
    """The item's annotation: decoded JSON when it is JSON (dicts, lists), else the text."""
    text = item.get("annotation")
    if text is None:
        return None
    try:
        return json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return text


@dataclass(frozen=True)
class ReportSection:
    """A section a protocol adds to the HTML report of a run (`JudgeProtocol.report_sections`)."""

    anchor: str  # the section's id in the page (links, tests)
    title: str  # its heading, plain text
    html: str  # its body: HTML whose every value the protocol escaped


class JudgeHandle(Protocol):
    """A judge backend as a benchmark's command holds it (capeval.adapters.base's backends are such handles)."""

    name: str
    revision: str

    def close(self) -> None: ...


class CommandTools(Protocol):
    """What the CLI hands a benchmark's own commands (`JudgeProtocol.cli_commands`): the services above the protocol
    layer they use (tests/test_layers.py keeps a protocol package from importing the CLI, the judging loop, the report
    or a backend itself). engine/cli/command_tools.py implements it."""

    def build_judge(self, name: str, model: str | None, base_url: str | None, options: list[str]) -> JudgeHandle:
        """A judge backend from the registry, as `capeval judge --judge NAME --judge-model M --judge-base-url U
        --judge-option KEY=VALUE...` builds it (the user's mistakes are UsageErrors naming the option)."""

    def run_judging(self, requests: pa.Table, judge: JudgeHandle, *, cache_dir: Path, protocol: JudgeProtocol,
                    progress: bool) -> tuple[pa.Table, object]:
        """(verdicts, summary) of the judge loop over `requests` (REQUESTS_WITH_CONTEXT) with the judgment cache in
        `cache_dir`; the summary prints as one line."""

    def leaderboards(self, table: pl.DataFrame, protocol: str) -> str:
        """The leaderboards every scoring command prints for a metrics table of `protocol`."""

    def sentence_embeddings(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-norm sentence embeddings of `texts`, one row each (the local judge's bundled model)."""


class JudgeProtocol:
    """Base class; subclasses set `name`, `version`, `codes` and implement `render` and `parse`.

    Everything the rest of capeval needs to know about a protocol is declared here, so report/, sweep/, judging/,
    datasets/ and metrics/ find it through the registry (capeval.engine.registry.lookup("protocol", name)) and never import
    a protocol package by name (docs/architecture.md; tests/test_layers.py enforces it)."""

    name: str = ""
    version: str = "1"
    codes: tuple[type, ...] = ()

    # -- declarations read by report/, sweep/, datasets/ ---------------------------------------------------------
    #: judge steps whose rows carry no verdict of their own (their answers feed the next step)
    intermediate_steps: tuple[str, ...] = ()
    #: headline metrics in display order (leaderboards, terminal tables); empty = every overall metric
    headline: tuple[str, ...] = ()
    #: one line per metric it reports, saying what the number is (the report's and leaderboards' legend):
    #: ((metric, definition), ...), e.g. ("CapP", "precision: TP / (TP + FP), ...")
    metric_definitions: tuple[tuple[str, str], ...] = ()
    #: the frame spec shown to the judge when the protocol's judge sees frames (None: a text-only judge)
    judge_frames: str | None = None
    #: protocol params that name a prompt pack file (checked and made absolute by sweep validation)
    pack_params: tuple[str, ...] = ("prompts",)
    #: dataset kinds whose items this protocol reads (None: any kind whose items carry `item_columns`)
    dataset_kinds: tuple[str, ...] | None = None
    #: ITEMS columns every item must fill for this protocol (beyond item_id, video_id, task)
    item_columns: tuple[str, ...] = ()
    #: the item `task` values this protocol knows (empty: any)
    tasks: tuple[str, ...] = ()
    #: item or verdict columns its metrics break down by (report tables, --by)
    breakdowns: tuple[str, ...] = ()
    #: the columns its compute_metrics reads, per input ("verdicts", "items", "captions"); an input not named here
    #: (or None) is handed whole. A sweep's end of cell hands the metrics only these: polars copies every column it
    #: is given, and a 100,000-row cell's reply, detail and item texts were ~60 MB of its peak memory.
    metric_columns: dict[str, tuple[str, ...]] | None = None
    #: `capeval compare`: the verdict column the headline is averaged over (per-task metrics, then their mean)
    compare_average_over: str | None = None
    #: `capeval compare`: the metrics mode used when the run does not say
    compare_default_mode: str = "strict"
    #: `capeval align`: added to a verdict code to read it on the scale the judge scores (codes 0-4 for scores 1-5: 1)
    verdict_score_offset: int = 0
    #: built-in caption prompts named after this benchmark's captioning settings (capeval's own wording), which a
    #: sweep names by id like capeval's generic ones (capeval.engine.prompts_library.builtin_prompts)
    caption_prompts: tuple[CaptionPrompt, ...] = ()
    #: every param the protocol reads (engine/params.py: name, type, default, valid values); a param it does not
    #: declare is refused at --check and before a run. None: undeclared (any name passes: a plugin's choice)
    params: tuple[Param, ...] | None = None
    #: the benchmark's construction pipeline (`capeval construct NAME`, `capeval construct --list`): a
    #: capeval.engine.construct.pipeline.ConstructionPipeline, whose `name` is the NAME users type; None: it builds
    #: no items. A protocol returns it from a property that imports its pipeline module on use (that module runs
    #: the judging path, a layer above the protocol: docs/architecture.md).
    construction = None

    def dataset_problem(self, kind: str, items: pa.Table | None = None, media: dict | None = None,
                        source=None) -> str | None:
        """Why this protocol cannot judge a dataset of kind `kind` (None: it can), from its declarations: the kind
        (`dataset_kinds`), then, given the dataset's items (only the rows it reads: capeval.engine.sweep.pairs), the columns
        every item must fill (`item_columns`) and the tasks it knows (`tasks`), and, when its judge sees frames
        (`judge_frames`) and `media` ({video_id: path}) is given, a media path for every video. Without `items`
        only the kind is checked (a dataset not loaded yet). `source`: the table file the items were read from, so
        that an item is named by its file, row and column."""
        if self.dataset_kinds is not None and kind not in self.dataset_kinds:
            return f"it reads datasets of kind {' or '.join(map(repr, self.dataset_kinds))}, not {kind!r}"
        if items is None or items.num_rows == 0:
            return None
        if (problem := self.columns_problem(items, source)) is not None:
            return problem
        if self.tasks:
            unknown = sorted(set(items.column("task").to_pylist()) - set(self.tasks))
            if unknown:
                return (f"its tasks are {', '.join(self.tasks)}; the items have task(s) "
                        f"{', '.join(map(repr, unknown[:5]))}{' ...' if len(unknown) > 5 else ''}")
        if self.judge_frames is not None and media is not None:
            videos = list(dict.fromkeys(items.column("video_id").to_pylist()))
            without = [v for v in videos if not media.get(v)]
            if without:
                return (f"its judge sees the videos; {len(without)} of {len(videos)} videos have no media path "
                        f"(e.g. {without[0]!r})")
        return None

    def columns_problem(self, items: pa.Table, source=None) -> str | None:
        """Why some item lacks a column this protocol needs (`item_columns`), naming the first such item by file,
        row and column when `source` (its table file) is given; None when every item has them."""
        from capeval.engine.inputs import item_location

        for column in self.item_columns:
            empty = _empty_rows(items, column)
            if len(empty):
                first = items.slice(empty[0].as_py(), 1).to_pylist()[0]
                return (f"it needs `{column}` in every item; {len(empty)} of {items.num_rows} items have none "
                        f"(e.g. {first['item_id']!r}); the first: {item_location(source, first, column)}")
        return None

    def item_problem(self, item: dict) -> tuple[str, str] | None:
        """(column, why) when this protocol cannot render `item` although it has every `item_columns` column (a
        multiple-choice answer that is none of its options); None when it can. Checked for every item before any work."""
        return None

    def items_problems(self, items: pa.Table, source=None, limit: int = 5) -> list[str]:
        """The first `limit` items `item_problem` refuses, each as "FILE: row N, column 'C': why" (or by item id
        without a `source` file), and a count of the rest."""
        from capeval.engine.inputs import item_location

        out, n = [], 0
        # a slice of rows as dicts at a time: 100,000 item dicts at once were ~140 MB of peak memory
        for start in range(0, items.num_rows, _ITEM_SLICE):
            for item in items.slice(start, _ITEM_SLICE).to_pylist():
                found = self.item_problem(item)
                if found is None:
                    continue
                n += 1
                if len(out) < limit:
                    out.append(f"{item_location(source, item, found[0])}: {found[1]}")
        if n > limit:
            out.append(f"... and {n - limit} more item(s) like these")
        return out

    def metric_params(self, params: dict) -> dict:
        """The params of a run that its metrics read too (declared with `metrics=True`; undeclared protocols: `mode`
        and `average`); the rest shape requests only. A sweep passes these to compute_metrics."""
        if self.params is None:
            return {k: v for k, v in params.items() if k in ("mode", "average")}
        wanted = {p.name for p in self.params if p.metrics}
        return {k: v for k, v in params.items() if k in wanted}

    def caption_file_rules(self, mode: str | None) -> dict:
        """Keyword arguments for capeval.engine.inputs.read_captions when a run of this protocol in `mode` reads a user's
        caption file: {} (the generic rules) unless the protocol's official script reads such files differently."""
        return {}

    def check_params(self, mode: str, params: dict) -> list[tuple[str, str]]:
        """(param, problem) for each protocol param that is wrong, found before anything is judged: names the
        protocol does not declare (`params`) and values its declaration refuses. Generic checks (pack files,
        judge_frames) are done by the caller; a protocol adds checks across params by overriding this."""
        if self.params is None:
            return []
        return param_problems(self.params, params, f"protocol {self.name!r}")

    def packs_used(self, mode: str, params: dict) -> dict:
        """{pack param: PromptPack} of the packs a run with these params renders from: the files its `pack_params`
        name, else (for `prompts`) the pack the mode resolves to (capeval's own in strict mode). Run records name
        these behind every number; a protocol whose default pack lives elsewhere overrides this."""
        from capeval.engine.packs import load_pack, resolve_pack

        out = {}
        for key in self.pack_params:
            if params.get(key):
                out[key] = load_pack(params[key])
            elif key == "prompts":
                out[key] = resolve_pack(self.name, None, mode=mode or "strict")
        return out

    def paired_spec(self, mode: str):
        """How `capeval compare` pairs two systems' verdicts: an capeval.engine.metrics.paired.PairedSpec, or None when
        the protocol has no paired statistic (compare then skips it, saying so)."""
        return None

    def verdict_labels(self) -> dict[int, str]:
        """code -> name for the report's sample browser; empty when a code's meaning depends on the step (several
        code sets)."""
        enums = [c for c in self.codes if isinstance(c, type) and issubclass(c, enum.IntEnum)]
        return {int(m): m.name for m in enums[0]} if len(enums) == 1 else {}

    # -- what the benchmark brings beyond judging (hooks; the defaults bring nothing) -----------------------------
    def cli_commands(self, subparsers, tools: CommandTools) -> None:
        """Adds the benchmark's own commands (`capeval <benchmark> ...`) to the CLI's argparse `subparsers`; each
        command's function gets the parsed args and may use `tools`. Default: none."""

    def report_sections(self, run_path: Path) -> list[ReportSection]:
        """Sections this protocol adds to the HTML report of the run folder `run_path` (from files its own tools wrote
        there), in page order; [] when the run holds nothing for them."""
        return []

    def stand_in_answer(self, request: StandInRequest) -> StandIn | None:
        """The local judge's plumbing answer to one of this protocol's requests (engine/stand_in.py: the texts it
        compares by meaning and the reply), or None when the protocol has none for this request (the local judge
        then reports the request as one it cannot answer)."""
        return None

    # -- building ---------------------------------------------------------------------------------------------
    def render(self, item: dict, caption: dict, *, seed: int, **opts) -> list[Rendered]:
        raise NotImplementedError

    def build_requests(self, items: pa.Table, captions: pa.Table, *, judge: str, judge_revision: str,
                       seeds: Iterable[int] = (0,), **opts) -> pa.Table:
        """First-step requests for every (item, caption) pair and judge seed, sorted so that requests sharing a
        caption are adjacent. A caption that failed (null text) gives rows marked `missing` in their context; the
        runner turns them into MISSING verdicts without asking the judge."""
        pairs = pair_items_captions(items, captions)
        rows = []
        revision = tagged_revision(judge_revision, protocol_tag(self.name, self.version))
        for item, cap in pairs:
            base = {"item_id": item["item_id"], "video_id": item["video_id"], **caption_identity(cap)}
            for trial, seed in enumerate(seeds):
                for r in self.render(item, cap, seed=int(seed), **opts):
                    if cap.get("text") is None:
                        r.parse = {**r.parse, "missing": f"caption failed: {cap.get('error') or 'no text'}"}
                    rows.append(make_row(r, base, protocol=self.name, judge=judge, judge_revision=revision,
                                         seed=int(seed), trial=trial))
        return rows_to_table(rows)

    def next_requests(self, requests: pa.Table, verdicts: pa.Table, *, judge: str, judge_revision: str) -> pa.Table:
        """Requests of the next step given the finished ones (their rows in `requests`, parsed in `verdicts`)."""
        return REQUESTS_WITH_CONTEXT.empty_table()

    def _next_rows(self, requests: pa.Table, verdicts: pa.Table, step: str, judge: str, judge_revision: str,
                   render_next) -> list[dict]:
        """Helper: `render_next(request_row, verdict_row, RequestContext) -> list[Rendered]` for the finished rows of
        `step`.
        `verdicts` is row-aligned with `requests` (the runner guarantees it)."""
        if requests.num_rows != verdicts.num_rows:
            raise ValueError(f"{self.name}: {requests.num_rows} requests but {verdicts.num_rows} verdicts")
        revision = tagged_revision(judge_revision, protocol_tag(self.name, self.version))
        rows = []
        for req, v in zip(requests.to_pylist(), verdicts.to_pylist()):
            if req["step"] != step:
                continue
            base = {k: req[k] for k in ("item_id", "video_id", "caption_key", "captioner", "prompt_id", "frame_spec")}
            for r in render_next(req, v, RequestContext.decode(req["context"])):
                rows.append(make_row(r, base, protocol=self.name, judge=judge, judge_revision=revision,
                                     seed=req["seed"], trial=req["trial"]))
        return rows

    def judging_policy(self, mode: str = "strict", **params) -> JudgingPolicy:
        """Re-ask rules for a run with these protocol params (see JudgingPolicy); protocols override for official
        mode."""
        return JudgingPolicy(mode=mode)

    # -- parsing ----------------------------------------------------------------------------------------------
    def parse(self, request: dict, text: str) -> tuple[int, ParseStatus, str | None]:
        raise NotImplementedError

    # -- metrics ----------------------------------------------------------------------------------------------
    #: whether compute_metrics is given the run's CAPTIONS (False: its caption groups come from the verdicts alone)
    metrics_read_captions: bool = True

    def metrics_module(self) -> ModuleType:
        """The `metrics` module beside the protocol's class (its own package, wherever it lives)."""
        package = type(self).__module__
        if not _is_package(package):
            package = package.rpartition(".")[0]
        return importlib.import_module(f"{package}.metrics")

    def compute_metrics(self, verdicts, **kwargs):
        """Delegates to metrics_module()'s compute_metrics."""
        return self.metrics_module().compute_metrics(verdicts, **kwargs)

    # -- the benchmark's release files (as its authors published them) ----------------------------------------------
    def release_dataset_kind(self, path: Path) -> str | None:
        """The dataset kind that reads `path` when it is this benchmark's release layout, else None (`capeval judge
        --items PATH` without --dataset asks every protocol; an items table is the default)."""
        return None

    def read_captions(self, path: Path, items: pa.Table, rules: dict) -> pa.Table:
        """CAPTIONS for `items` from `--captions PATH`: a caption file read with `rules` (caption_file_rules), a
        caption naming its video by the media file matched to the items (docs/inputs.md "Video ids")."""
        captions, _ = with_dataset_video_ids(read_captions(path, **rules), items)
        return captions

    #: the folder layout of the benchmark's released judge verdicts that `released_verdicts` reads, in words for the
    #: messages of commands that take a verdict table or such a folder (e.g. "released judgments/<model>/ folder");
    #: None: it reads none
    released_verdicts_folder: str | None = None

    def released_verdicts_problem(self, path: Path) -> str | None:
        """Why the folder `path` is not a set of this benchmark's released judge verdicts (None: it is one); checked
        before anything is loaded."""
        return f"a folder; protocol {self.name!r} reads no released verdicts: give a VERDICTS table (Parquet or CSV)"

    def released_verdicts(self, path: Path, items: pa.Table, flag: str):
        """(VERDICTS rows (polars) of `items`, the number of released records for ids that are no item of `items`)
        from the folder of released judge verdicts `path`; a UsageError naming `flag` when it cannot be read."""
        raise UsageError(f"{flag} {path}: {self.released_verdicts_problem(path)}")

    def __repr__(self) -> str:
        return f"<protocol {self.name}@{self.version}>"


def reask_seed(seed: int, attempt: int) -> int:
    return derived_seed("reask", int(seed), int(attempt))


def _is_package(module_name: str) -> bool:
    module = sys.modules.get(module_name)
    return bool(module is not None and getattr(module, "__path__", None) is not None)
