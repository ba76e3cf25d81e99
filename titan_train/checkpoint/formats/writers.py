"""Writing checkpoints: atomically (into a hidden sibling renamed into place only when
complete, so a crash never leaves a half-written checkpoint under the real name), and in
each output format: torch.save, DCP, HF safetensors shards + config.json, Meta
consolidated.00.pth + params.json."""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from titan_train.checkpoint.formats import CheckpointError, fit, naming, safetensors_io
from titan_train.runtime import write_errors

DEFAULT_SHARD_BYTES = 5 * 10**9  # what transformers' save_pretrained uses ("5GB")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


# What an output of each format is made of. Replacing a destination (convert --force, an
# export rerun) is allowed only when it holds nothing else: a person's notes, a tokenizer or
# another tool's files in it are never deleted.
OUTPUT_FILES = {
    "dcp": (".metadata", "*.distcp"),
    "hf": ("config.json", "model.safetensors", "model-*-of-*.safetensors", "model.safetensors.index.json"),
    "meta": ("params.json", "consolidated.*.pth"),
    "torch": ("model.pt",),  # an export's folder; convert --to torch writes one file
}


def foreign_files(folder: Path, fmt: str) -> list[str]:
    """Files under `folder` that a `fmt` output does not write (none: it may be replaced)."""
    patterns = OUTPUT_FILES[fmt]
    return sorted(
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*")
        if not p.is_dir() and not (p.parent == folder and any(fnmatch.fnmatch(p.name, g) for g in patterns))
    )


def refuse_foreign(dst: Path, fmt: str, *, is_file_output: bool) -> None:
    """Raise unless `dst` is an output of format `fmt`, which may be replaced."""
    if is_file_output:
        if dst.is_dir() and not dst.is_symlink():
            raise CheckpointError(
                f"{dst} is a folder; the {fmt} output is one file, so it would replace the folder and everything in it",
                fix="choose another destination",
            )
        return
    if not dst.is_dir() or dst.is_symlink():
        raise CheckpointError(
            f"{dst} is a file, not a {fmt} checkpoint folder; refusing to replace it",
            fix="choose another destination, or remove it yourself",
        )
    foreign = foreign_files(dst, fmt)
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise CheckpointError(
            f"{dst} holds files a {fmt} checkpoint does not ({shown}); refusing to replace it",
            fix="choose another destination, or move those files out first",
        )


@contextmanager
def atomic_output(dst: str | Path, *, overwrite: bool = False, needed: int | None = None) -> Iterator[Path]:
    """Yield a temporary path next to `dst`; rename it to `dst` when the block succeeds,
    delete it when it fails. A caller that overwrites checks first that `dst` is its own
    kind of output (refuse_foreign), before any work starts. A full disk (`needed`: the
    bytes the output takes, when known) or a parent that cannot be a folder is one line, a
    write_errors.WriteError; whatever `dst` held before is untouched either way."""
    dst = Path(dst)
    if dst.exists() and not overwrite:
        raise CheckpointError(f"{dst} already exists", fix="Choose another destination, or pass --force to replace it")
    tmp = dst.parent / f".{dst.name}.partial-{os.getpid()}"
    try:
        dst.parent.mkdir(parents=True, exist_ok=True)
        _remove(tmp)
        yield tmp
    except BaseException as e:
        interrupted = isinstance(e, (KeyboardInterrupt, SystemExit, GeneratorExit))  # DCP's error is a BaseException
        if not interrupted:
            write_errors.release(e)
        _remove(tmp)  # first: the free space the message reports is what is free now
        explained = None if interrupted else write_errors.explain(e, dst, needed)
        if explained is not None:
            raise explained from None
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


def write_hf(
    items: Iterable[tuple[str, object]],
    folder: Path,
    args,
    *,
    dtype: str,
    max_shard_bytes: int = DEFAULT_SHARD_BYTES,
    on_tensor: Callable[[str, int], None] | None = None,
) -> list[Path]:
    """HF safetensors shards (+ index) and a config.json LlamaForCausalLM loads."""
    files = safetensors_io.write_sharded(
        to_hf(items, args), folder, max_shard_bytes=max_shard_bytes, on_tensor=on_tensor
    )
    (folder / "config.json").write_text(json.dumps(fit.to_hf_config(args, dtype), indent=2) + "\n", encoding="utf-8")
    return files


def write_meta(items: Iterable[tuple[str, object]], folder: Path, args) -> Path:
    """One consolidated.00.pth (model-parallel size 1) and params.json, Meta's layout."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "consolidated.00.pth"
    write_torch(dict(items), path)
    (folder / "params.json").write_text(json.dumps(fit.to_meta_params(args), indent=2) + "\n", encoding="utf-8")
    return path
