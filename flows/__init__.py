"""Everything that runs: the CLI, the run machinery, the stages, the recipes, the LLM gateway, evaluation."""
