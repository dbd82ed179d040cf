"""The gateway against the loopback fake: retries, answer parsing, limits and budgets, batch mode, faults,
the local model."""
