"""Adapters of the source fetcher: sources (GET each source)."""
