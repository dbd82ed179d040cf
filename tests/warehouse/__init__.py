"""The DuckDB warehouse: writes, cache keys, imports of published releases."""
