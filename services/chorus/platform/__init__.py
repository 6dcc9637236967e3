"""The platform's services: each one a package run as ``python -m chorus.platform.<service>``.

Durable timers, dead letters, the audit projection, the gateway, the approval gate, the
notifier, the console, the key service, rollouts and the outcome view. No service imports
another; each uses the runtime (``chorus``) and the contracts (``chorus.contracts``).
"""
