"""Readers for the tables people bring (items, captions, verdicts as JSONL, CSV or Parquet), checked before any
work; columns are documented in docs/inputs.md."""

from capeval.engine.inputs.tables import item_location, read_captions, read_items
from capeval.engine.inputs.verdicts import check_verdicts, read_verdicts

__all__ = ["check_verdicts", "item_location", "read_captions", "read_items", "read_verdicts"]
