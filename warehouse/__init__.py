"""DuckDB: the DDL, the Warehouse class that runs every SQL statement, cache keys, audit, imports, exports."""

import os

# DuckDB's allocator on Linux (jemalloc, built with the `duckdb_je_` prefix, so it reads this variable) keeps the
# pages a statement freed for a second before it hands them back; a checkpoint frees and takes tens of MB in
# less, and those pages were up to 65 MB of a 20,000-seed run's peak. At 0 they go back as they are freed
# (bench/README.md, "Twenty-first round"). Read once, as DuckDB loads: set before it is imported. A value of
# the user's own wins.
os.environ.setdefault("DUCKDB_JE_MALLOC_CONF", "dirty_decay_ms:0")
