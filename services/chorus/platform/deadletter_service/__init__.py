"""The dead-letter service: records services gave up on, kept to inspect, redrive or discard."""
