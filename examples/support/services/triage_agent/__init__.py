"""triage_agent: answers ticket.received with ticket.answered."""
