"""Facts about processes on this host: is a pid alive, and which process holds it.

Both the run lock (checkpoint/run_lock.py) and a prepared token folder's writer marker
(data/token_folder.py) ask "is the process that wrote this still running?".
"""

from __future__ import annotations

import os
from pathlib import Path


def proc_start(pid: int) -> str | None:
    """The kernel's start time of `pid` (Linux), to tell a reused pid from the original."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def pid_alive(pid: int) -> bool:
    """True when a process with this pid exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
