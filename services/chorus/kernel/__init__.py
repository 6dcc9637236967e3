"""The record path and a service's own tables: the Kafka edge, lanes, the chain and its
steps, the store, the outbox relay, the codec and the runner. It imports no feature package."""
