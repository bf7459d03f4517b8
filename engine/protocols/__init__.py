"""One package per protocol: `codes` (verdict codes, defined once), `prompts` (rendering judge requests),
`parsing` (judge output → verdict code) and `metrics` (verdict table → Polars metrics)."""
