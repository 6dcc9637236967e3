"""The report agent: fans its sources out (a stage with a deadline), drafts with the LLM, delivers."""
