"""The `ifsynth` command in child processes: one-line errors, exports, reruns, kills."""
