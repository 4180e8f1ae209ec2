"""Package data: the bundled simulated pool."""
