"""The rollout service: which release of a service takes new workflows, and how each does."""
