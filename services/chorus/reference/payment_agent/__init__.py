"""The payment agent: pays approved invoices through the external payment API, exactly once."""
