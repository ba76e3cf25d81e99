"""`titan-train plot`: loss, tokens/s, MFU and memory over steps from runs' metrics.jsonl,
one line per run, as one PNG (matplotlib, the `plot` extra)."""

from __future__ import annotations

import json
from pathlib import Path

from titan_train.components.metrics import MissingExtra

PANELS = (
    ("loss", "loss", 1.0),
    ("tokens_per_s", "tokens/s", 1.0),
    ("mfu", "MFU (%)", 100.0),
    ("peak_mem_gib", "peak memory (GiB)", 1.0),
)


class PlotError(Exception):
    """A run folder without readable metrics (one line)."""


def metrics_file(run: str | Path) -> Path:
    run = Path(run)
    path = run if run.suffix == ".jsonl" else run / "metrics.jsonl"
    if not path.is_file():
        raise PlotError(f"{run}: no metrics.jsonl (give a run folder, e.g. outputs/llama_debug, or the file itself)")
    return path


def read_series(path: Path) -> dict[str, dict[int, float]]:
    """field -> {step: value}; a step logged twice (a resumed run repeats it) keeps the later value."""
    series: dict[str, dict[int, float]] = {key: {} for key, _, _ in PANELS}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            raise PlotError(f"{path}:{n}: not a JSON line") from None
        if "step" not in rec:
            continue
        for key, _, scale in PANELS:
            if isinstance(rec.get(key), (int, float)):
                series[key][int(rec["step"])] = rec[key] * scale
    if not any(series.values()):
        raise PlotError(f"{path}: no step records yet")
    return series


def _labels(runs: list[Path]) -> list[str]:
    names = [r.name if r.suffix != ".jsonl" else r.parent.name for r in runs]
    return names if len(set(names)) == len(names) else [str(r) for r in runs]


def plot(runs: list[str | Path], out: str | Path) -> Path:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingExtra("titan-train plot needs matplotlib: pip install 'titan-npu[plot]'") from None
    runs = [Path(r) for r in runs]
    data = [read_series(metrics_file(r)) for r in runs]
    fig, axes = plt.subplots(2, 2, figsize=(12, 8), dpi=100, sharex=True)
    for ax, (key, title, _) in zip(axes.flat, PANELS):
        for label, series in zip(_labels(runs), data):
            points = sorted(series[key].items())
            if points:
                ax.plot([s for s, _ in points], [v for _, v in points], label=label, linewidth=1.2)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        if not ax.lines:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes, color="gray")
    for ax in axes[1]:
        ax.set_xlabel("step")
    axes[0][0].legend(fontsize="small")
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out
