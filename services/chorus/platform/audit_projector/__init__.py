"""The audit projector: an append-only audit log and a status per workflow."""
