"""Chorus tooling: the ``chorus`` command, the schema compatibility gate, the AsyncAPI
document and architecture pictures, the demo and the local dev stack.

It uses the runtime (``chorus``) and the contracts (``chorus.contracts``) and never a
service: the command talks to services over their HTTP APIs. Nothing deployed imports it.
"""
