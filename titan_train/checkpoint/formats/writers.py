"""Writing checkpoints: atomically (into a hidden sibling renamed into place only when
complete, so a crash never leaves a half-written checkpoint under the real name), and in
each output format: torch.save, DCP, HF safetensors shards + config.json, Meta
consolidated.00.pth + params.json."""
from __future__ import annotations

import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator

from titan_train.checkpoint.formats import CheckpointError, fit, naming, safetensors_io

DEFAULT_SHARD_BYTES = 5 * 10**9   # what transformers' save_pretrained uses ("5GB")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


@contextmanager
def atomic_output(dst: str | Path, *, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary path next to `dst`; rename it to `dst` when the block succeeds,
    delete it when it fails."""
    dst = Path(dst)
    if dst.exists() and not overwrite:
        raise CheckpointError(f"{dst} already exists", fix="Choose another destination, or pass --force to replace it")
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.parent / f".{dst.name}.partial-{os.getpid()}"
    _remove(tmp)
    try:
        yield tmp
    except BaseException:
        _remove(tmp)
        raise
    if dst.exists():
        _remove(dst)
    os.replace(tmp, dst)


def write_torch(state_dict: dict, path: Path) -> None:
    import torch

    torch.save(state_dict, path)


def to_hf(items: Iterable[tuple[str, object]], args) -> Iterator[tuple[str, object]]:
    """Trainer names -> HF names, q/k rows permuted per head (GQA: k has n_kv_heads)."""
    heads = {"n_heads": args.n_heads, "n_kv_heads": args.n_kv_heads or args.n_heads}
    for name, tensor in items:
        hf_name, rope = naming.ours_to_hf(name)
        yield hf_name, (naming.to_hf_rows(tensor, heads[rope]) if rope else tensor)


def write_hf(items: Iterable[tuple[str, object]], folder: Path, args, *, dtype: str,
             max_shard_bytes: int = DEFAULT_SHARD_BYTES, on_tensor: Callable[[str, int], None] | None = None) -> list[Path]:
    """HF safetensors shards (+ index) and a config.json LlamaForCausalLM loads."""
    files = safetensors_io.write_sharded(to_hf(items, args), folder, max_shard_bytes=max_shard_bytes,
                                         on_tensor=on_tensor)
    (folder / "config.json").write_text(json.dumps(fit.to_hf_config(args, dtype), indent=2) + "\n", encoding="utf-8")
    return files


def write_meta(items: Iterable[tuple[str, object]], folder: Path, args) -> Path:
    """One consolidated.00.pth (model-parallel size 1) and params.json, Meta's layout."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "consolidated.00.pth"
    write_torch(dict(items), path)
    (folder / "params.json").write_text(json.dumps(fit.to_meta_params(args), indent=2) + "\n", encoding="utf-8")
    return path
