"""Benchmark release loaders (capability, dream1k, vdc, vidcapbench, vatex_eval: release files -> ITEMS/CAPTIONS/
VERDICTS) and the dataset kinds a sweep or `capeval judge --dataset` names (registry.py, kinds/)."""
