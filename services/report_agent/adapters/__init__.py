"""Adapters of the report agent: sources (GET each source), delivery (POST the approved
report); the language model is chorus.llm."""
