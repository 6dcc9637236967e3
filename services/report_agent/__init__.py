"""The report agent: gathers sources with a checkpoint after each, drafts with the LLM, delivers."""
