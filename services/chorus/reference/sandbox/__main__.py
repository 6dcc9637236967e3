"""``python -m chorus.reference.sandbox [--port 9400] [--smtp-port 9425] [--flaky-source beta]
[--payment-failures N]``."""

from __future__ import annotations

import argparse

from aiohttp import web

from chorus.reference.sandbox.app import SandboxConfig, create_app


def main() -> None:
    parser = argparse.ArgumentParser(description="Stand-ins for the systems Chorus calls")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9400)
    parser.add_argument("--flaky-source", action="append", default=[])
    parser.add_argument("--payment-failures", type=int, default=0)
    parser.add_argument("--payment-delay", type=float, default=0.0)
    parser.add_argument("--webhook-secret", default="demo-webhook-secret")
    parser.add_argument("--smtp-port", type=int, default=None, help="run a mail server stand-in here")
    parser.add_argument("--plugin", action="append", default=[], help="a project's module extending it")
    args = parser.parse_args()
    config = SandboxConfig(
        webhook_secret=args.webhook_secret,
        flaky_sources=frozenset(args.flaky_source),
        payment_failures_per_key=args.payment_failures,
        payment_delay_s=args.payment_delay,
        smtp_port=args.smtp_port,
        plugins=tuple(args.plugin),
    )
    web.run_app(create_app(config), host=args.host, port=args.port, print=None)


if __name__ == "__main__":
    main()
