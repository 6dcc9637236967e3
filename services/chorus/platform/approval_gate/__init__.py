"""The approval gate: pauses workflows for people, escalates when they do not answer."""
