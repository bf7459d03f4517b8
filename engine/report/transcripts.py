"""Judge transcripts as people read them: `capeval show` (text and JSON) and the report's sample browser.

`load_transcripts(path)` reads a run folder's `transcripts/` (labelled with the sweep's cell labels, as the results
table names the systems) or, for a verdict table written by `capeval judge --out V.parquet`, `V.transcripts.parquet`
beside it. `request_records` turns rows into one JSON-ready dict per request (the same content the text shows);
`format_request` renders one for a terminal, every untrusted string (captions, prompts, replies, ids) escaped by
capeval.engine.safetext."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from capeval.engine.registry import lookup
from capeval.engine.report.rundir import CELL_COLUMNS, cell_labels
from capeval.engine.safetext import for_terminal
from capeval.engine.schemas import ParseStatus
from capeval.engine.store.transcripts import TRANSCRIPT_KEY, beside, transcript_files

STATUS = {int(s): s.name.lower() for s in ParseStatus}
_ORDER = [*CELL_COLUMNS, "item_id", "task", "step", "sub_index", "trial", "seed"]


def transcript_paths(path: str | Path) -> list[Path]:
    """The transcript files of a run folder, or of a verdict table (its `.transcripts.parquet` beside it)."""
    p = Path(path)
    if p.is_file():
        side = beside(p)
        return [side] if side.is_file() else []
    return transcript_files(p)


def load_transcripts(path: str | Path, *, request_keys=None) -> pl.DataFrame | None:
    """Transcript rows with the cell labels (CELL_COLUMNS; `protocol_name` is the protocol itself); None when
    there are none. `request_keys`: only those requests (the report reads the rows it embeds)."""
    paths = transcript_paths(path)
    if not paths:
        return None
    frames = []
    for p in paths:
        lf = pl.scan_parquet(p)
        if request_keys is not None:
            lf = lf.filter(pl.col("request_key").is_in(list(request_keys)))
        frames.append(lf.collect())
    t = pl.concat(frames, how="diagonal_relaxed")
    t = t.with_columns(pl.col("protocol").alias("protocol_name"))
    labels = cell_labels(Path(path)) if Path(path).is_dir() else None
    if labels is not None and t.height:
        t = t.drop([c for c in CELL_COLUMNS if c in labels.columns and c in t.columns]).join(
            labels, on="cell_key", how="inner")  # the committed cells (recover removes any other)
    for c in CELL_COLUMNS:
        if c not in t.columns:
            t = t.with_columns(pl.lit("-").alias(c))
    return t.with_columns(pl.col(c).cast(pl.String).fill_null("-") for c in CELL_COLUMNS)


def select(t: pl.DataFrame, *, item: str | None = None, system: str | None = None,
           protocol: str | None = None) -> pl.DataFrame:
    """Rows of one item id, of the systems a selector names ('captioner=X,prompt_id=Y', or a bare value of any
    cell column), of one protocol (its label or its name)."""
    if item is not None:
        t = t.filter(pl.col("item_id") == item)
    if protocol is not None:
        t = t.filter((pl.col("protocol") == protocol) | (pl.col("protocol_name") == protocol))
    for part in (system or "").split(","):
        key, sep, value = (s.strip() for s in part.partition("="))
        if not key:
            continue
        if sep:
            if key not in CELL_COLUMNS:
                raise ValueError(f"--system: unknown column {key!r}; use one of {', '.join(CELL_COLUMNS)}")
            t = t.filter(pl.col(key) == value)
        else:
            t = t.filter(pl.any_horizontal(pl.col(c) == key for c in CELL_COLUMNS))
    return t.sort([c for c in _ORDER if c in t.columns], nulls_last=True, maintain_order=True)


def verdict_labels(protocol_name: str) -> dict[int, str]:
    """code -> name, as the protocol declares (`verdict_labels()`); empty (codes shown as numbers) for a protocol
    that is not registered here, or whose codes mean different things in different steps (the code alone would be
    ambiguous there)."""
    try:
        return lookup("protocol", protocol_name).verdict_labels()
    except KeyError:
        return {}


def _verdict_label(code, labels: dict) -> str | None:
    if code is None:
        return None
    return "no verdict" if code < 0 else labels.get(int(code), str(code))


def _sum(attempts: list[dict], field: str):
    values = [a[field] for a in attempts if a.get(field) is not None]
    return sum(values) if values else None


def request_records(t: pl.DataFrame) -> list[dict]:
    """One dict per transcript row: cell, identity, messages, sampling, attempts, final parse and verdict, totals."""
    labels = {name: verdict_labels(name) for name in t["protocol_name"].unique().to_list()} if t.height else {}
    out = []
    for r in t.iter_rows(named=True):
        codes = labels.get(r["protocol_name"], {})
        attempts = []
        for a in r["attempts"] or []:
            attempts.append({**a, "key": a["key"] or r["request_key"], "status": STATUS.get(a["parse_status"]) if a["parse_status"] is not None else None,
                             "verdict_label": _verdict_label(a["verdict"], codes)})
        user = {"role": "user", "content": r["user"]}
        if r["frames_path"]:
            user["images"] = {"frames_path": r["frames_path"], "digest": r["images_digest"], "count": r["n_images"]}
        messages = ([{"role": "system", "content": r["system"]}] if r["system"] is not None else []) + [user]
        # the first ask's seed as sent: None where none was (official mode); else the row's judge seed
        seed = attempts[0].get("seed") if attempts else r["seed"]
        schema = ({"name": r["json_schema_name"], "digest": r["json_schema_digest"]}
                  if r["json_schema_digest"] else None)
        out.append({
            "cell": {c: r[c] for c in CELL_COLUMNS}, "cell_key": r.get("cell_key"), "request_key": r["request_key"],
            **{k: r[k] for k in ("protocol_name", "task", "item_id", "video_id", "step", "sub_index", "trial")},
            "caption": r.get("caption"), "messages": messages,
            "sampling": {"max_tokens": r["max_tokens"], "temperature": r["temperature"], "seed": seed,
                         "choices": r["choices"], "json_schema": schema},
            "attempts": attempts,
            "parse": {"status": STATUS.get(r["parse_status"]), "detail": r["detail"], "error": r["error"]},
            "verdict": r["verdict"], "verdict_label": _verdict_label(r["verdict"], codes),
            "tokens": {f: _sum(attempts, k) for f, k in (("prompt", "prompt_tokens"),
                                                         ("cached", "cached_prompt_tokens"),
                                                         ("completion", "completion_tokens"),
                                                         ("reasoning", "reasoning_tokens"))},
            "latency_s": _sum(attempts, "latency_s"), "cost_usd": _sum(attempts, "cost_usd"),
        })
    return out


def _block(text, indent: str = "    ") -> str:
    return "\n".join(indent + line for line in for_terminal(text, keep_newlines=True).split("\n"))


def _n(v, fmt: str = "{}") -> str:
    return "-" if v is None else fmt.format(v)


def format_request(rec: dict, index: int | None = None, total: int | None = None) -> str:
    """One request as terminal text (untrusted strings escaped)."""
    e = for_terminal
    cell = " · ".join(e(v) for v in rec["cell"].values())
    head = f"[{index}/{total}] " if index is not None else ""
    lines = [f"── {head}{cell}",
             f"item {e(rec['item_id'])} (video {e(rec['video_id'])}, task {e(rec['task'])}"
             + (f", step {e(rec['step'])}" if rec["step"] else "") + f", sub {rec['sub_index']}, trial "
             f"{rec['trial']})  request {rec['request_key']}"]
    s = rec["sampling"]
    sampling = [f"{name} {'none sent' if s[name] is None else s[name]}" for name in ("max_tokens", "temperature", "seed")]
    if s["choices"]:
        sampling.append("choices [" + ", ".join(e(c) for c in s["choices"]) + "]")
    if s["json_schema"]:
        sampling.append(f"json_schema {e(s['json_schema']['name'] or '')} {s['json_schema']['digest']}".replace("  ", " "))
    lines.append("sampling: " + ", ".join(sampling))
    if rec["caption"] is not None:
        lines += ["caption:", _block(rec["caption"])]
    for m in rec["messages"]:
        lines += [f"{m['role']}:", _block(m["content"])]
        if m.get("images"):
            im = m["images"]
            lines.append(f"    [images: {_n(im['count'])} frames from {e(im['frames_path'])}, digest {e(im['digest'])}]")
    for a in rec["attempts"]:
        lines.append(f"attempt {a['attempt']} ({a['source']}; temperature "
                     f"{'none sent' if a['temperature'] is None else a['temperature']}, seed {a['seed']}): "
                     f"{a['status'] or '-'}" + (f", verdict {e(a['verdict_label'])}" if a["verdict_label"] else "")
                     + f" · {_n(a['latency_s'], '{:.2f}')} s · tokens prompt {_n(a['prompt_tokens'])} (cached "
                     f"{_n(a['cached_prompt_tokens'])}), completion {_n(a['completion_tokens'])} (reasoning "
                     f"{_n(a['reasoning_tokens'])})" + (f" · ${a['cost_usd']:.6f}" if a["cost_usd"] else ""))
        if a["reply"] is not None:
            lines += ["  reply:", _block(a["reply"])]
        if a["error"]:
            lines.append(f"  error: {e(a['error'])}")
    if not rec["attempts"]:
        lines.append("not asked")
    p = rec["parse"]
    lines.append(f"verdict: {e(rec['verdict_label'] or '-')} ({p['status'] or '-'})"
                 + (f"; detail: {e(p['detail'])}" if p["detail"] else "")
                 + (f"; error: {e(p['error'])}" if p["error"] else ""))
    t = rec["tokens"]
    lines.append(f"totals: tokens prompt {_n(t['prompt'])} (cached {_n(t['cached'])}), completion "
                 f"{_n(t['completion'])} (reasoning {_n(t['reasoning'])}); latency {_n(rec['latency_s'], '{:.2f}')} s;"
                 f" cost {_n(rec['cost_usd'], '${:.6f}')}")
    return "\n".join(lines)


def join_key(columns) -> list[str]:
    """The columns a verdict table and a transcript table are joined on (cell_key when both have one)."""
    return [c for c in ["cell_key", *TRANSCRIPT_KEY] if c in columns]


def attempts_text(attempts) -> str | None:
    """The asks of one request in a few lines (the sample browser's `attempts`)."""
    if not attempts:
        return "not asked"
    lines = []
    for a in attempts:
        tokens = ("" if a["prompt_tokens"] is None else
                  f", tokens {a['prompt_tokens']} in ({a['cached_prompt_tokens'] or 0} cached) / "
                  f"{a['completion_tokens']} out")
        latency = "" if a["latency_s"] is None else f", {a['latency_s']:.2f} s"
        status = STATUS.get(a["parse_status"], "-") if a["parse_status"] is not None else "-"
        lines.append(f"attempt {a['attempt']} ({a['source']}, temperature "
                     f"{'none sent' if a['temperature'] is None else a['temperature']}, seed {a['seed']}{latency}"
                     f"{tokens}): {status}" + (f": {a['error']}" if a["error"] else ""))
    return "\n".join(lines)


def with_transcripts(run_path: Path, verdicts: pl.DataFrame) -> pl.DataFrame:
    """`verdicts` (labelled verdict rows) with what their judge was sent: judge_system, judge_prompt (the user
    message; images as a reference), attempts (text) and the caption judged where the row has none (captions read
    from a `[[captions]]` file are never in the run folder's captions/). Rows without a transcript keep nulls."""
    extra = ["judge_system", "judge_prompt", "attempts"]
    if not verdicts.height:
        return verdicts.with_columns(pl.lit(None, dtype=pl.String).alias(c) for c in extra)
    t = load_transcripts(run_path, request_keys=verdicts["request_key"].unique().to_list())
    if t is None or not t.height:
        return verdicts.with_columns(pl.lit(None, dtype=pl.String).alias(c) for c in extra)
    on = [c for c in join_key(t.columns) if c in verdicts.columns]
    images = (pl.when(pl.col("frames_path").is_not_null()).then(
        pl.format("\n[images: {} frames from {}, digest {}]", pl.col("n_images").cast(pl.String).fill_null("?"),
                  pl.col("frames_path"), pl.col("images_digest").fill_null("-"))).otherwise(pl.lit("")))
    texts = pl.Series("attempts", [attempts_text(a) for a in t["attempts"].to_list()], dtype=pl.String)
    t = t.select(*on, pl.col("system").alias("judge_system"),
                 pl.concat_str(pl.col("user"), images).alias("judge_prompt"), pl.col("caption").alias("_tx_caption"))
    t = t.with_columns(texts)
    casts = [pl.col(c).cast(pl.Int64) for c in ("sub_index", "trial") if c in on]
    t = t.with_columns(casts).unique(subset=on, keep="first")
    out = verdicts.with_columns(casts).join(t, on=on, how="left", nulls_equal=True)
    if "caption" in out.columns:
        out = out.with_columns(pl.col("caption").fill_null(pl.col("_tx_caption")))
    else:
        out = out.rename({"_tx_caption": "caption"})
    return out.drop("_tx_caption", strict=False)
