"""The `ifsynth` command: argument parsing, tables and progress; no logic of its own."""
