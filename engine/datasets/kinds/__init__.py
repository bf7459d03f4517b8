"""One module per dataset kind; each registers itself with capeval.engine.datasets.registry."""
