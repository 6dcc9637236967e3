"""Adapters of the keyring: its keys table."""
