"""The InstructIR recipe."""
