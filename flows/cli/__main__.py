"""`python -m ifsynth.flows.cli`: the same command as the `ifsynth` script."""

from ifsynth.flows.cli.warm import script

script()
