"""Benchmarks: each module prints its figures as one JSON line (see bench/README.md)."""
