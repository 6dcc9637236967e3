"""The DBOS Transact baseline (runs in .local/bench-dbos-venv, never imported by Chorus)."""
