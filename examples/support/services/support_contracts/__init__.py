"""The event models of support. Importing this package registers them: the registry's
``project.yaml`` names it, so every chorus command and service knows them."""

from support_contracts import events as events
