"""Metrics as the papers define them, retrieval runs, scoring a release."""
