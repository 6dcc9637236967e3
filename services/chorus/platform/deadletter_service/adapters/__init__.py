"""PostgreSQL access of the dead-letter service."""
