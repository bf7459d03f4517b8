"""DREAM-1K conformance helpers (tests/fidelity/test_dream1k_*.py): clips as ITEMS, captions and scripted judge
replies, run through the production path (protocol.build_requests -> the replay judge -> run_judging, every step)
while recording each request the judge receives.

Two sources of clips: the cases of autodq_oracle.jsonl (`case_*`, read generically: any held-out case of the same
kind works unchanged) and `scripted_clips`, real DREAM-1K clips with captions and replies derived deterministically
from each clip (well-formed, fenced, repaired, retried, empty and never-accepted replies in every step), so that a
comparison of two protocols on them exercises every path of AutoDQ's official rules."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from capeval.engine.judging.runner import run_judging
from capeval.engine.protocols.lvcap import dream1k
from capeval.engine.schemas import CAPTIONS, conform

ROOT = Path(__file__).resolve().parents[2]
DREAM = ROOT.parent / "shared" / "data" / "dream1k" / "DREAM-1k.jsonl"
TRIES = 10  # the official max_retry: the replies of one step cover attempts 0..TRIES-1
ORACLE_REPLY_KEYS = {"extract": "extract_replies", "recall": "recall_replies", "precision": "precision_replies"}
EMPTY_EVENT_VIDS = ("649", "804", "980", "981")  # DREAM-1K's clips without reference events


# -- the oracle's cases --------------------------------------------------------------------------------------------
def case_items(case: dict) -> pa.Table:
    clips = [(str(v["vid"]), v["events"], v["response"], v["dataset"],
              {**v["extra_info"], "dataset": v["dataset"], "idx": v["idx"]}) for v in case["videos"]]
    return dream1k.clip_items(clips)


def case_captions(case: dict) -> pa.Table:
    return captions_table([str(v["vid"]) for v in case["videos"]], [v["prediction"] for v in case["videos"]])


def case_replies(case: dict) -> list[dict]:
    """Successive calls of one step are attempts 0, 1, 2, ...; the last scripted reply repeats for any further call
    (the oracle's convention)."""
    return replay_records({(str(v["vid"]), step): v[key] for v in case["videos"]
                           for step, key in ORACLE_REPLY_KEYS.items()})


# -- shared plumbing -----------------------------------------------------------------------------------------------
def captions_table(vids: list[str], texts: list[str | None], errors: list[str | None] | None = None) -> pa.Table:
    n = len(vids)
    return conform(pa.table({"caption_key": [f"cap-{v}" for v in vids], "captioner": ["model"] * n,
                             "prompt_id": ["describe"] * n, "frame_spec": ["uniform:8"] * n, "video_id": vids,
                             "text": pa.array(texts, pa.string()),
                             "error": pa.array(errors or [None] * n, pa.string())}), CAPTIONS)


def replay_records(replies: dict[tuple[str, str], list[str | None]]) -> list[dict]:
    """(item_id, step) -> scripted replies, as replay records for attempts 0..TRIES-1 (the last one repeating)."""
    return [{"item_id": item, "step": step, "attempt": a, "text": texts[min(a, len(texts) - 1)]}
            for (item, step), texts in replies.items() for a in range(TRIES)]


class RecordingJudge:
    """A judge that records every request it receives (what the server would be sent) and answers through
    another judge; its name and revision are the inner judge's, so the run is the inner judge's run."""

    def __init__(self, inner):
        self.inner, self.name, self.revision = inner, inner.name, inner.revision
        self.sent: list[dict] = []

    def judge(self, requests):
        for r in requests:
            m = dict(r.meta or {})
            self.sent.append({"item_id": m.get("item_id"), "step": m.get("step"),
                              "sub_index": int(m.get("sub_index") or 0), "attempt": int(m.get("attempt") or 0),
                              "system": r.system, "user": r.user, "max_tokens": r.max_tokens,
                              "temperature": r.temperature, "seed": r.seed, "choices": r.choices,
                              "json_schema": r.json_schema, "task": r.task})
        return self.inner.judge(requests)

    def close(self) -> None:
        self.inner.close()


def sent_texts(sent: list[dict]) -> list[tuple]:
    """What was sent, independent of the protocol's name: (item, step, sub_index, attempt, system, user, sampling,
    structured output), sorted."""
    keys = ("item_id", "step", "sub_index", "attempt", "system", "user", "max_tokens", "temperature", "seed",
            "choices", "json_schema")
    return sorted((tuple(s[k] for k in keys) for s in sent), key=repr)


def run(protocol, params: dict, items: pa.Table, captions: pa.Table, judge, cache_dir: Path):
    """The production path: (requests, verdicts with every step's rows, the requests the judge received)."""
    recorder = RecordingJudge(judge)
    requests = protocol.build_requests(items, captions, judge=recorder.name, judge_revision=recorder.revision,
                                       **params)
    verdicts = run_judging(requests, recorder, cache_dir=cache_dir, protocol=protocol, protocol_params=params,
                           progress=False, keep_intermediate=True)
    return requests, pl.from_arrow(verdicts), recorder.sent


def metrics(protocol, verdicts: pl.DataFrame, items: pa.Table, captions: pa.Table, params: dict,
            n_resamples: int = 0) -> pl.DataFrame:
    """compute_metrics as a sweep calls it: the run's metric params only."""
    return protocol.compute_metrics(verdicts, items=pl.from_arrow(items), captions=pl.from_arrow(captions),
                                    n_resamples=n_resamples, seed=0, **protocol.metric_params(params))


# -- scripted clips ------------------------------------------------------------------------------------------------
def _h(*parts) -> int:
    return int.from_bytes(hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()[:8], "big")


def _sentences(text: str) -> list[str]:
    out = [s.strip() for s in text.replace("\n", " ").split(". ") if s.strip()]
    return [s if s.endswith(".") else s + "." for s in out]


def select_vids(n: int = 200) -> list[str]:
    """n clips spread over all five sources (every fifth clip), DREAM-1K's clips without events among them."""
    every = [str(v) for v in range(1, 1001, 5)]
    extra = [v for v in EMPTY_EVENT_VIDS if v not in every]
    kept = [v for v in every if v not in EMPTY_EVENT_VIDS]
    chosen = sorted(kept[:1] + kept[1 + len(extra):] + list(EMPTY_EVENT_VIDS), key=int)
    if n >= len(chosen):
        return chosen
    spread = [v for v in chosen[::len(chosen) // n] if v not in EMPTY_EVENT_VIDS][:n - len(EMPTY_EVENT_VIDS)]
    return sorted(spread + list(EMPTY_EVENT_VIDS), key=int)


def _caption(k: int, refs: list[str]) -> str | None:
    ref = refs[k]
    kind = k % 5
    if kind == 0:
        return ref
    if kind == 1:  # another clip's reference: one whose own caption is not its reference (no two texts alike)
        return refs[(k + 5) % len(refs)]
    if kind == 2:  # quotes, braces and a Python-format look-alike: rendered literally, quotes turned single
        first = _sentences(ref)[0] if _sentences(ref) else ref
        return f'{first} A man says "{{hello}}" and points at the {{0}} sign.'
    if kind == 3:  # newlines and upper case (lower-cased in every official prompt)
        return "\n".join(_sentences(ref)).upper()
    # unique per clip: identical request texts are asked once per run (the judgment cache), whatever the item
    return f"A person stands still next to door number {k}."


def _relationships(vid: str, step: str, n: int) -> list[str]:
    return [("entailment", "entailment", "neutral", "contradiction")[_h(vid, step, i) % 4] for i in range(n)]


def _entail_reply(vid: str, step: str, events: list[str], k: int) -> str:
    labels = _relationships(vid, step, len(events))
    if k % 6 == 4:  # case and spaces (accepted after strip().lower())
        labels = [" Entailment " if x == "entailment" else x.upper() for x in labels]
    judged = [{"event": e, "relationship": lab, "reason": f"scripted {i}"} for i, (e, lab) in enumerate(zip(events,
                                                                                                             labels))]
    body = json.dumps({"events": judged}, ensure_ascii=False)
    if k % 6 == 1:
        return f"```json\n{body}\n```"
    if k % 6 == 2:  # no outer braces: the official clean-up adds them
        return body[1:-1]
    if k % 6 == 3 and judged:  # trailing commas: removed by the clean-up
        return body[:-2] + ", ]}"
    return body


def scripted_clips(n: int = 200) -> tuple[pa.Table, pa.Table, list[dict], dict]:
    """(items, captions, replay records, expectations) for n real DREAM-1K clips. Expectations say which clips the
    script makes fail and which need a re-ask, so a test can check the set exercises what it claims."""
    all_items = dream1k.load_clips(DREAM)
    wanted = select_vids(n)
    items = all_items.filter(pc.is_in(all_items["item_id"], pa.array(wanted)))
    rows = items.to_pylist()
    refs = [r["answer"] for r in rows]
    vids = [r["item_id"] for r in rows]
    texts, errors, replies = [], [], {}
    expect = {"extract_failed": set(), "recall_failed": set(), "precision_failed": set(), "reasked": set(),
              "caption_failed": set(), "empty_extraction": set()}
    for k, row in enumerate(rows):
        vid = row["item_id"]
        caption = _caption(k, refs)
        error = None
        if k == 27:  # a caption that failed upstream: every request of the clip says so
            caption, error = None, "captioner timed out"
            expect["caption_failed"].add(vid)
        elif k == 13:
            caption = ""
        texts.append(caption)
        errors.append(error)
        events_ref = json.loads(row["annotation"])
        reference = row["answer"]
        # extraction: the caption's sentences (lower-cased, '"' -> "'" as the official input is), up to six
        extracted = [s for s in _sentences((caption or "").lower().replace('"', "'"))][:6]
        if k % 11 == 3:
            extracted = []
            expect["empty_extraction"].add(vid)
        if k % 23 == 4 and extracted:  # only the first item must be a string: the rest is judged as it is
            extracted = extracted + [1]
        good = str({"events": extracted})
        if k % 7 == 0:
            good = f"```python\n{good}\n```"
        extract = [good]
        if k % 13 == 5:
            extract = ["Here are the events: " + good, good]
            expect["reasked"].add(vid)
        if k % 29 == 7:
            extract = ["I cannot list events for this caption."]
            expect["extract_failed"].add(vid)
        # recall: the reference events (or the reference itself as the one event) judged against the caption
        shown_r = events_ref if events_ref else [reference.lower()]
        recall = [_entail_reply(vid, "recall", shown_r, k)]
        if k % 9 == 2:
            recall = [_entail_reply(vid, "recall", shown_r + ["an extra event."], k), recall[0]]
            expect["reasked"].add(vid)
        if k % 10 == 6:  # a reply without content counts as a try, as the official loop counts the exception
            recall = [None] + recall
            expect["reasked"].add(vid)
        if k % 37 == 11:
            recall = ['{"events": [{"event": "x", "relationship": "maybe"}]}']
            expect["recall_failed"].add(vid)
        # precision: the accepted extraction's events (or the caption itself) judged against the reference
        shown_p = [str(e) for e in extracted] if extracted else [(caption or "").lower().replace("\n", " ")]
        precision = [_entail_reply(vid, "precision", shown_p, k + 1)]
        if k % 8 == 5:
            bad = json.loads(_entail_reply(vid, "precision", shown_p, 0))
            bad["events"][0]["relationship"] = "probably"
            precision = [json.dumps(bad), precision[0]]
            expect["reasked"].add(vid)
        if k % 19 == 8:  # 'events' a string of the right length, then a top-level list: both rejected
            precision = [json.dumps({"events": "x" * len(shown_p)}),
                         json.dumps([{"relationship": "entailment"}] * len(shown_p))] + precision
            expect["reasked"].add(vid)
        if k % 41 == 17:
            precision = ["no JSON here"]
            expect["precision_failed"].add(vid)
        replies.update({(vid, "extract"): extract, (vid, "recall"): recall, (vid, "precision"): precision})
    return items, captions_table(vids, texts, errors), replay_records(replies), expect
