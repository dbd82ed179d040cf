"""The template registry: rendering, hashing, overlays."""
