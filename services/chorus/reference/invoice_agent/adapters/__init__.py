"""The invoice agent's one outside system is a language model, reached through
chorus.llm (an OpenAI-compatible client); it keeps no tables of its own."""
