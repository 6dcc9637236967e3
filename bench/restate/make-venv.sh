#!/usr/bin/env bash
# Build .local/bench-restate-venv from bench/restate/requirements.txt (PyPI restate-sdk,
# hypercorn, asyncpg, aiohttp), and fetch the Restate server binary from the npm registry
# into .local/bench-restate/<version>/: the version and its sha512 per platform are pinned
# in fetch_server.py, which checks the tarball against them and the registry's metadata.
# Both only once (the venv is rebuilt when the requirements change).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
"$ROOT/bench/make-venv.sh" "$ROOT/bench/restate/requirements.txt" "$ROOT/.local/bench-restate-venv"
exec "$ROOT/.local/bench-restate-venv/bin/python" "$ROOT/bench/restate/fetch_server.py" "$ROOT/.local/bench-restate"
