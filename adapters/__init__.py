"""Backends behind small protocols (capeval.adapters.base): judges and captioners."""
