"""The service runtime: the Kafka edge, the handling pipeline and the outbox relay."""
