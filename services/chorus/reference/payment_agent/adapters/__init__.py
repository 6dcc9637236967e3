"""Adapters of the payment agent: payments (the provider's HTTP API)."""
