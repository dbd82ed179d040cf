"""DuckDB: the DDL, the Warehouse class that runs every SQL statement, cache keys, audit, imports, exports."""
