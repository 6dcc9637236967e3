#!/usr/bin/env bash
# Build .local/bench-dbos-venv from bench/dbos/requirements.txt (PyPI `dbos`), once;
# rebuilt when the requirements change. DBOS cannot share .venv with faust.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
exec "$ROOT/bench/make-venv.sh" "$ROOT/bench/dbos/requirements.txt" "$ROOT/.local/bench-dbos-venv"
