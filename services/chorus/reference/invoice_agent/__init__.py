"""The invoice agent: reads an invoice with the LLM and checks it against its purchase order."""
