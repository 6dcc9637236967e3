"""The key service handles no workflow event. Erasure and retention reach it as they reach
every service (the runtime's data requests on chorus.data): its own table answers them
through ``owned_data`` (adapters.keys.KeyShredding), destroying keys instead of deleting
rows, and the runtime confirms with data.removed."""

from __future__ import annotations

from chorus.kernel.service import On

HANDLERS: list[On] = []
