"""One module per dataset kind; each registers itself with engine.datasets.registry."""
