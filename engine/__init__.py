"""capeval: high-throughput evaluation engine for video captions."""
__version__ = "0.1.0"
