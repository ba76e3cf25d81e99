"""`metrics.wandb = true`: the metrics.jsonl records also go to Weights & Biases (the `wandb`
extra). Offline by default (`metrics.wandb_mode`): the run is written under
<run folder>/wandb and never waits for a server, so a job on an air-gapped cluster cannot
block on it; `wandb sync <run folder>/wandb/offline-run-*` uploads it later.

The start record's config becomes the W&B run config; each step record (training, and
validation with its `validation_*` fields) is one `log` at its step, numeric fields only,
named as in metrics.jsonl. Rank 0 only, like every sink.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from titan_train.components.metrics import MissingExtra

MODES = ("offline", "online")


def require_wandb() -> None:
    try:
        import wandb  # noqa: F401
    except ImportError:
        raise MissingExtra(
            "metrics.wandb = true needs wandb, which is not installed: pip install 'titan-npu[wandb]' "
            "(or set metrics.wandb = false)"
        ) from None


class WandbSink:
    def __init__(self, folder: str | Path, project: str, name: str, mode: str = "offline"):
        require_wandb()
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._init = dict(project=project, name=name, dir=str(self.folder), mode=mode, reinit=True)
        self._run = None

    def _started(self, config: dict[str, Any] | None = None):
        """The run opens at the first record, with the start record's config passed to
        `wandb.init`: the config then travels in the run record itself, where a separate
        `config.update` racing the offline writer could be lost from a short run's file."""
        if self._run is None:
            import wandb

            self._run = wandb.init(config=config or {}, **self._init)
        elif config:
            self._run.config.update(config, allow_val_change=True)
        return self._run

    def write(self, record: dict[str, Any]) -> None:
        if "step" not in record:
            if record.get("event") == "start":
                self._started(record.get("config", {}))
            return
        values = {
            k: v for k, v in record.items() if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        self._started().log(values, step=record["step"])

    def close(self) -> None:
        """`finish` can return while wandb-core is still writing the offline file; `teardown`
        waits for it, so the run on disk is whole when the trainer reports it done."""
        if self._run is not None:
            import wandb

            self._run.finish()
            wandb.teardown()
