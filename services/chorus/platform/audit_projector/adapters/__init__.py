"""PostgreSQL access of the audit projector: the projection, its read helpers, maintenance."""
