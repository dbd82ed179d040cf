"""Pydantic models at every boundary: seeds, answers, configs, warehouse records, release modes, errors."""
