"""Adapters of the report agent: delivery (POST the approved report); the language model is
chorus.llm, and the sources are fetched by the source fetcher."""
