"""The Restate baseline (runs in .local/bench-restate-venv; the driver imports only fetch_server)."""
