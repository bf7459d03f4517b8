"""The inputs of a judging command, read and checked before the first request: the protocol and its params, the
items (an items table, a dataset kind, or a benchmark's release layout detected by its protocol), the captions (a
caption file, or the ones the dataset brings), and the frames a multimodal judge is shown."""

from __future__ import annotations

import sys
from dataclasses import dataclass, fields
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from capeval.engine.datasets.registry import load
from capeval.engine.errors import UsageError
from capeval.engine.frames.cache import decode_videos_table
from capeval.engine.frames.sampling import FrameSpec
from capeval.engine.inputs import read_items
from capeval.engine.judge_run.options import protocol_params
from capeval.engine.protocols.base import JudgeProtocol
from capeval.engine.registry import lookup, names
from capeval.engine.safetext import clip
from capeval.engine.schemas import FRAMES, conform


@dataclass(frozen=True)
class InputOptions:
    """What a judging command reads, as `capeval judge` and `judge validate` take it: --protocol with --param /
    --mode / --prompts, --items with --dataset / --media-root / --limit, --captions, --frames / --frame-size, and
    the --cache that decoded judge frames go to."""

    protocol: str
    items: Path
    captions: Path | None = None
    captions_format: str | None = None  # another tool's output (capeval.engine.inputs.tool_formats)
    captions_id_field: str | None = None
    dataset: str | None = None
    media_root: Path | None = None
    limit: int | None = None
    param: tuple[str, ...] = ()
    mode: str | None = None
    prompts: Path | None = None
    frames: Path | None = None
    frame_size: int = 448
    cache: Path = Path(".capeval/judge-cache")

    @classmethod
    def of(cls, args) -> InputOptions:
        """The options from a parsed command line that has (at least) these attributes."""
        return cls(**{f.name: getattr(args, f.name) for f in fields(cls) if hasattr(args, f.name)})


def release_kind(path: Path) -> str:
    """The dataset kind that reads `path`: a registered protocol's release layout (JudgeProtocol.
    release_dataset_kind), else "items" (an items table)."""
    for name in names("protocol"):
        kind = lookup("protocol", name).release_dataset_kind(path)
        if kind:
            return kind
    return "items"


def load_dataset(path: Path, dataset: str | None, media_root: Path | None, protocol: str):
    """(ITEMS, CAPTIONS that came with the dataset or None) from --items as the given or detected kind."""
    kind = dataset or release_kind(path)
    if kind == "items":
        if media_root is not None:
            raise UsageError("--media-root applies to dataset kinds; an items table gives media_path itself")
        return read_items(path, benchmark=protocol), None
    params = {"path": str(path.resolve())}
    if media_root is not None:
        params["media_root"] = str(media_root.resolve())
    try:
        loaded = load(kind, params, base_dir=Path.cwd())
    except KeyError as exc:
        raise UsageError(f"--dataset: {exc.args[0]}") from None
    return loaded.items, loaded.captions


def load_items(path: Path, dataset: str | None, media_root: Path | None, protocol: str):
    return load_dataset(path, dataset, media_root, protocol)[0]


def lookup_protocol(name: str) -> JudgeProtocol:
    """The registered protocol, or a UsageError naming the known ones."""
    try:
        return lookup("protocol", name)
    except KeyError as exc:
        raise UsageError(str(exc.args[0])) from None


def caption_file_rules(protocol: str, params: dict) -> dict:
    """How a run of `protocol` with these params reads a user's caption file (read_captions keywords)."""
    return lookup_protocol(protocol).caption_file_rules(params.get("mode"))


def limit_items(items, n: int | None):
    if n is None:
        return items
    if n < 1:
        raise UsageError(f"--limit must be at least 1, got {n}")
    keep = list(dict.fromkeys(items.column("video_id").to_pylist()))[:n]
    return items.filter(pc.is_in(items.column("video_id"), value_set=pa.array(keep, pa.string())))


def protocol_and_items(options: InputOptions):
    """(params, protocol, items, captions the dataset brings or None), the items checked against the protocol."""
    params = protocol_params(options.protocol, list(options.param), options.mode, options.prompts)
    protocol = lookup_protocol(options.protocol)
    items, bundled = load_dataset(options.items, options.dataset, options.media_root, options.protocol)
    items = limit_items(items, options.limit)
    # items the protocol cannot render: refused before any request, by file, row and column
    source = options.items if options.items.is_file() else None
    missing = protocol.columns_problem(items, source)
    problems = [missing] if missing else protocol.items_problems(items, source)
    if problems:
        raise UsageError(f"--protocol {options.protocol} cannot judge these items: " + "; ".join(problems))
    return params, protocol, items, bundled


def given_captions(options: InputOptions, protocol: JudgeProtocol, params: dict, items, bundled):
    """--captions read for these items (JudgeProtocol.read_captions), else the captions the dataset brought (a
    UsageError when neither)."""
    if options.captions is None and bundled is None:
        raise UsageError("--captions is required (this dataset brings no captions of its own)")
    if options.captions is None:
        if options.captions_format is not None or options.captions_id_field is not None:
            raise UsageError("--captions-format and --captions-id-field describe --captions, which is not given")
        return bundled
    rules = dict(protocol.caption_file_rules(params.get("mode")))
    if options.captions_format is not None or options.captions_id_field is not None:
        if options.captions.is_dir():
            raise UsageError(f"--captions {options.captions}: a folder; --captions-format reads one file")
        rules.update(caption_format=options.captions_format, id_field=options.captions_id_field)
    return protocol.read_captions(options.captions, items, rules)


def check_pairs(items, captions, source) -> None:
    """A UsageError when no caption matches any item (captions match by item_id, then video_id), with a few ids
    from each side: judging would only produce rows without a verdict, and a rerun could not change that."""
    if captions is None:
        return
    item_ids = set(items.column("item_id").to_pylist()) | set(items.column("video_id").to_pylist())
    caption_ids = list(dict.fromkeys(captions.column("video_id").to_pylist()))
    if any(c in item_ids for c in caption_ids):
        return

    def some(values) -> str:
        values = list(dict.fromkeys(values))
        more = f" (+{len(values) - 3} more)" if len(values) > 3 else ""
        return ", ".join(f"'{clip(v, 60)}'" for v in values[:3]) + more

    videos, ids = items.column("video_id").to_pylist(), items.column("item_id").to_pylist()
    item_side = f"video_id {some(videos)}" + (f", item_id {some(ids)}" if ids != videos else "")
    raise UsageError(f"{source}: no (item, caption) pair matched (captions match items by item_id, then video_id, then media file): "
                     f"items have {item_side}; captions have {some(caption_ids)}")


def frames_for_judge(options: InputOptions, protocol: JudgeProtocol, params: dict, items):
    """FRAMES from --frames, else decoded for a protocol whose judge sees frames, else None."""
    frames = read_frames(options.frames) if options.frames else None
    if frames is None and protocol.judge_frames is not None:
        frames = judge_frames(items, params, protocol.judge_frames, options.cache / "frames", options.frame_size)
    return frames


def judge_frames(items, params: dict, default_spec: str, cache_dir: Path, size: int):
    """FRAMES for a multimodal judge, decoded from the items' media with `judge_frames` (set to the protocol's
    default spec, JudgeProtocol.judge_frames, when absent, so the requests name the frames they show); images give
    their one frame."""
    spec = params.setdefault("judge_frames", default_spec)
    media = {v: p for v, p in zip(items.column("video_id").to_pylist(), items.column("media_path").to_pylist())
             if p is not None}
    if not media:
        raise UsageError("this protocol shows frames to its judge: give --frames, or items with media_path")
    missing = [p for p in media.values() if not Path(p).is_file()]
    if missing:
        raise UsageError(f"{len(missing)} of {len(media)} media files not found, e.g. {missing[0]}")
    print(f"[judge] decoding {spec} from {len(media)} videos/images for the judge", file=sys.stderr)
    table = decode_videos_table(list(media.values()), FrameSpec.parse(spec), size, cache_dir, video_ids=list(media))
    bad = [e for e in table.column("error").to_pylist() if e]
    if bad:
        print(f"[judge] {len(bad)} media could not be decoded (their items get no verdict), e.g. {clip(bad[0], 300)}",
              file=sys.stderr)
    return table


def read_frames(path: Path):
    """FRAMES from --frames (a UsageError when it is missing or not a FRAMES table)."""
    if not path.is_file():
        raise UsageError(f"frames file not found: {path}")
    try:
        return conform(pq.read_table(path), FRAMES)
    except Exception as exc:  # noqa: BLE001 - a non-Parquet or wrong-schema file
        raise UsageError(f"{path}: not a valid FRAMES table: {exc}") from None
