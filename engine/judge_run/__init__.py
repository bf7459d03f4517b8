"""What `capeval judge` does, as functions the commands call: read a protocol's items and captions from the files
people have (docs/inputs.md) or a benchmark's release layout, check everything before the first request, build the
judge backend from its options, judge through the content-addressed cache and report the protocol's metrics.

`capeval judge` (engine/cli/judge.py), `capeval judge validate` (engine/cli/validate.py), `capeval score` and the
construction pipelines use the same pieces: options.py (KEY=VALUE options, protocol params, output paths),
inputs.py (items, captions, frames), backend.py (the judge from --judge and its options), breakdowns.py (`--by`),
run.py (one judging run: verdicts, metrics, run record, exit code)."""
