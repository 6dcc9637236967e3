#!/usr/bin/env bash
# make-venv.sh [REQUIREMENTS VENV_DIR]: build a side venv for the bench once; rebuild it
# when the requirements file changes (its hash is the stamp). Defaults: the tools venv.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REQ="${1:-$ROOT/bench/requirements.txt}"
VENV="${2:-$ROOT/.local/bench-venv}"
PYTHON="${PYTHON:-python3.11}"
STAMP="$VENV/.requirements.sha256"
want="$(sha256sum "$REQ" | cut -d' ' -f1)"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" && -x "$VENV/bin/python" ]]; then exit 0; fi
command -v "$PYTHON" >/dev/null || { echo "make-venv: $PYTHON not found" >&2; exit 1; }
echo "make-venv: building $VENV from $REQ" >&2
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q -r "$REQ"
echo "$want" >"$STAMP"
