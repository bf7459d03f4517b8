"""Backends behind small protocols (adapters.base): judges and captioners."""
