"""triage_agent's adapters: its HTTP clients and repositories (its own tables), wired in by
bootstrap.py. Handlers never import them directly."""
