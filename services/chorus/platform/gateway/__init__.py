"""The gateway: accepts work over HTTP (202 + workflow id), lets people approve and watch it."""
