"""The LLM gateway: routing, retries, answer parsing, limits, batch mode, the local model.

It knows no stage and no recipe."""
