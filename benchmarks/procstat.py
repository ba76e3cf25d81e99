"""What the benchmarks read of a running process from /proc (Linux), in one place."""

from __future__ import annotations

from pathlib import Path


def hwm_kib(pid: int) -> int:
    """The process's peak resident set (VmHWM) in KiB; 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0
