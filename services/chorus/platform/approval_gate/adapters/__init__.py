"""Adapters of the approval gate: the approval policy table (policies). Its state is each
workflow's checkpoint (the runtime's store); it talks to nothing outside Chorus."""
