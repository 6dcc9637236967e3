"""The outside world, for the demo and the tests: a payment provider, data sources, an
OpenAI-compatible LLM, report delivery and a webhook receiver. Real HTTP; counts everything."""
