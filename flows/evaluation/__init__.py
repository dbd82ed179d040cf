"""Scoring a release: retrieval runs, the papers' metrics, INSTFOL."""
