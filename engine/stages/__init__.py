"""Pipeline stages on Ray: CPU decode (`decode`) -> caption actors (`caption`), wired per sweep by `pipeline`."""
