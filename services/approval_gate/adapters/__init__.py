"""The approval gate has no adapters: it talks to nothing outside Chorus, and its state is
each workflow's checkpoint (the runtime's store)."""
