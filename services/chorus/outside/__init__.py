"""Calling the world outside Chorus: HTTP calls, circuit breakers, rate limits, egress
rules, the LLM client, and stages (fan-out with a deadline)."""
