#!/usr/bin/env bash
# One-time set-up, run by `make demo` / `make test` before anything else.
#
#   VENV=.venv (default)   the virtual environment to create or reuse;
#   VENV=system            install into the current Python environment instead;
#   TORCH_SPEC=...         what to install when torch is missing (default torch==2.13.0).
#                          On Linux PyPI's torch==2.13.0 is the CUDA build (several GB);
#                          a pip configured with a local CPU wheel takes that instead.
#                          CPU only, anywhere:
#                          TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
#                          GPU users set the build they want, or install torch first
#                          (it is never replaced).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${VENV:-.venv}"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
if [ "$VENV" = "system" ]; then
    PY="${PYTHON:-python3}"
else
    if [ ! -x "$VENV/bin/python" ]; then
        echo "setup: creating $VENV"
        "${PYTHON:-python3}" -m venv "$VENV"
    fi
    PY="$VENV/bin/python"
fi

pip_install() {
    # pip's notes about unused local package folders are noise here; keep the exit status
    "$PY" -m pip install --quiet --disable-pip-version-check "$@" 2>&1 | { grep -v "is ignored: it is neither" || true; }
    return "${PIPESTATUS[0]}"
}

if ! "$PY" -c "import torch" >/dev/null 2>&1; then
    echo "setup: installing $TORCH_SPEC"
    # shellcheck disable=SC2086  # TORCH_SPEC may hold several pip arguments
    pip_install $TORCH_SPEC
fi
echo "setup: installing seq2seq-attn and its dependencies"
pip_install -e ".[dev]"
"$PY" -c "import torch, seq2seq_attn; print(f'setup: ok (torch {torch.__version__}, seq2seq-attn {seq2seq_attn.__version__})')"
