"""A service's own HTTP API: the FastAPI app with problem+json errors, API keys and roles,
signed links, and the server of /health and /metrics."""
