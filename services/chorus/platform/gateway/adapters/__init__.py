"""PostgreSQL, the audit projection and webhooks: the gateway's adapters."""
