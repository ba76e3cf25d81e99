#!/usr/bin/env bash
# Creates ./.venv with titan-npu installed (editable) and its test extras.
#
# torch: an existing torch (for instance one paired with torch_npu on an Ascend host) is
# reused as it is, through --system-site-packages; only when none is importable do we
# install torch==2.13.0 (a plain "torch" would pull a multi-GB CUDA build).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
VENV=${VENV:-.venv}
TORCH_PIN=${TORCH_PIN:-torch==2.13.0}

if [ ! -x "$VENV/bin/python" ]; then
    if TORCH_DEVICE_BACKEND_AUTOLOAD=0 "$PY" -c "import torch" >/dev/null 2>&1; then
        echo "setup: reusing the torch already installed for $PY"
        "$PY" -m venv --system-site-packages "$VENV"
    else
        "$PY" -m venv "$VENV"
    fi
fi

# pip's exit status counts; only its noise about unreadable local index folders is dropped.
pip_install() {
    "$VENV/bin/python" -m pip install --disable-pip-version-check -q "$@" 2>&1 \
        | { grep -v "^WARNING: Location" || true; }
    return "${PIPESTATUS[0]}"
}

if ! TORCH_DEVICE_BACKEND_AUTOLOAD=0 "$VENV/bin/python" -c "import torch" >/dev/null 2>&1; then
    echo "setup: installing $TORCH_PIN"
    pip_install "$TORCH_PIN"
fi
pip_install -e ".[test]"
"$VENV/bin/python" -c "import torch, titan_train, titan_doctor; print('setup: ok, torch', torch.__version__)"
