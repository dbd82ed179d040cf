"""The run machinery: config resolution, the run context, the recipe registry, the runner and the stage machinery."""
