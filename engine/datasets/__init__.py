"""The dataset kinds a sweep or `capeval judge --dataset` names (registry.py; the generic ones in kinds/) and what
release loaders share (JSON-lines records, media lookup, video ids). A benchmark's own release format lives in its
package (engine/protocols/<name>/), registered as a dataset kind."""
