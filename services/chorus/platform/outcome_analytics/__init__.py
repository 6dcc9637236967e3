"""Outcome analytics: per workflow type and hour, how workflows start, end, escalate and fail."""
