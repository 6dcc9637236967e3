"""The durable timer service: waits that survive restarts, deploys and crashes."""
