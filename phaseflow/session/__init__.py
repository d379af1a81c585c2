"""The session: one guided conversation - a model, the phase machine, tools, a store."""
