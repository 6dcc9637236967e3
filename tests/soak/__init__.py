"""The soak (``make soak``): all three reference workflows for an hour at half this machine's
capacity while faults drawn from a seed hit every few minutes. Not part of ``make test``."""
