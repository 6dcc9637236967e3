"""Reset from a step: a workflow's services roll their checkpoints back to what they were
before one of its events was handled, and handle that event again (an operator's repair)."""
