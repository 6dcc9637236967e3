"""The edges of outcome analytics: dead-letter producer, HTTP routes, Prometheus collector."""
