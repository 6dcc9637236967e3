"""PostgreSQL access of the timer service."""
