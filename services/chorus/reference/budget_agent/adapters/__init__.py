"""Adapters of the budget agent: ledger (its tables in PostgreSQL)."""
