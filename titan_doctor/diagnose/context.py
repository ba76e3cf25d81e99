"""What the checks look at, gathered once per run: env, interpreter, roots, requested
ranks, and the probe (started at construction so it overlaps everything else)."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from titan_doctor.diagnose import ascend, devices, probe


@dataclass
class Context:
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    python: str = field(default_factory=probe.default_python)
    ascend_roots: list[Path] | None = None
    dev_dir: Path = Path("/dev")
    shm: Path = Path("/dev/shm")
    nproc: int | None = None
    nnodes: int = 1
    backend: str = "auto"
    comm_timeout: float = 60.0
    logs: list[Path] = field(default_factory=list)
    import_torch: bool = True
    checkpoint: Path | None = None
    config: Any = None  # --config with --checkpoint: the loaded trainer JobConfig to compare against
    config_name: str = ""  # what the user typed for --config (named in findings)
    _probe: probe.Probe | None = None

    def start_probe(self) -> None:
        if self._probe is None:
            self._probe = probe.Probe(self.python, self.env, import_torch=self.import_torch)

    @property
    def probe(self) -> dict[str, Any]:
        self.start_probe()
        assert self._probe is not None
        return self._probe.result()

    @functools.cached_property
    def ascend(self) -> ascend.AscendInstall:
        return ascend.discover(self.env, self.ascend_roots)

    @functools.cached_property
    def npu_smi(self) -> devices.NpuSmi:
        return devices.run_npu_smi(self.env)

    @functools.cached_property
    def davinci(self) -> list[int]:
        return devices.davinci_nodes(self.dev_dir)

    @property
    def cann_version(self) -> str | None:
        cur = ascend.best(self.ascend)
        return cur.version if cur else None

    @functools.cached_property
    def ascend_present(self) -> bool:
        """Any sign this host is meant for Ascend (decides warn vs info for absences)."""
        return bool(
            self.davinci or self.npu_smi.found or self.ascend.driver_version or any(c.version for c in self.ascend.cann)
        )

    @property
    def wants_npu(self) -> bool:
        """Ascend on the host, or torch_npu installed: a missing CANN is then a problem."""
        return self.ascend_present or bool(self.probe.get("torch_npu", {}).get("installed"))

    @property
    def npu_ids(self) -> list[int]:
        return [n["id"] for n in self.npu_smi.npus] or self.davinci
