"""Start the torch / torch_npu probe in a subprocess, collect its JSON later.

The probe runs in the interpreter being diagnosed with TORCH_DEVICE_BACKEND_AUTOLOAD=0
so that a broken torch_npu cannot take `import torch` down with it. It is started first
and read last, so it overlaps with every other check.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).with_name("_probe_script.py")


class Probe:
    """A running probe; `result()` waits for it (bounded) and never raises."""

    def __init__(self, python: str, env: dict[str, str], *, import_torch: bool = True, timeout: float = 120.0):
        self.python = python
        self.timeout = timeout
        child_env = dict(env)
        child_env["TD_USER_AUTOLOAD"] = env.get("TORCH_DEVICE_BACKEND_AUTOLOAD", "")
        child_env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
        args = [python, str(SCRIPT)] + ([] if import_torch else ["--no-import-torch"])
        self._result: dict[str, Any] | None = None
        try:
            self._proc: subprocess.Popen | None = subprocess.Popen(
                args, env=child_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        except OSError as e:
            self._proc = None
            self._result = {"probe_error": f"cannot run {python}: {e.strerror or e}"}

    def result(self) -> dict[str, Any]:
        if self._result is not None:
            return self._result
        assert self._proc is not None
        try:
            out, err = self._proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.communicate()
            self._result = {
                "probe_error": f"the probe did not finish within {self.timeout:.0f} s (import torch hangs?)"
            }
            return self._result
        self._result = parse(out, err, self._proc.returncode)
        return self._result


def parse(out: str, err: str, returncode: int) -> dict[str, Any]:
    """The probe's last JSON line, or a `probe_error` saying why there is none."""
    for line in reversed(out.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                break
    tail = (err or out).strip().splitlines()[-1:] or [f"exit status {returncode}"]
    return {"probe_error": tail[0]}


def default_python() -> str:
    """The interpreter the doctor itself runs under (override with --python)."""
    return sys.executable
