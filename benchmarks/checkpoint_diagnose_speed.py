"""How long `titan-doctor diagnose --checkpoint` takes on multi-GB checkpoints, next to
what the same question costs other ways; and how much memory `titan-doctor convert` needs
next to the size of what it converts. Prints figures; never pass/fail.

The diagnose checkpoints are LLaMA-2-7B shaped and written sparsely (real headers /
metadata, holes for the tensor data), so they take seconds to make and no disk space:
  - HF: two bf16 safetensors shards + model.safetensors.index.json (13.5 GB)
  - DCP: a trainer step folder, bf16 weights + fp32 AdamW moments, 2 ranks' shards (67 GB)
The conversions run on a real (dense) fp32 checkpoint of --convert-mb megabytes.

    python benchmarks/checkpoint_diagnose_speed.py [--keep DIR] [--convert-mb 512]
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAYERS, DIM, FFN, VOCAB = 32, 4096, 11008, 32000


def llama7b_shapes() -> dict[str, tuple[int, ...]]:
    shapes = {"tok_embeddings.weight": (VOCAB, DIM), "norm.weight": (DIM,), "output.weight": (VOCAB, DIM)}
    for i in range(LAYERS):
        p = f"layers.{i}."
        shapes.update(
            {
                p + "attention.wq.weight": (DIM, DIM),
                p + "attention.wk.weight": (DIM, DIM),
                p + "attention.wv.weight": (DIM, DIM),
                p + "attention.wo.weight": (DIM, DIM),
                p + "feed_forward.w1.weight": (FFN, DIM),
                p + "feed_forward.w2.weight": (DIM, FFN),
                p + "feed_forward.w3.weight": (FFN, DIM),
                p + "attention_norm.weight": (DIM,),
                p + "ffn_norm.weight": (DIM,),
            }
        )
    return shapes


def numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def sparse_safetensors(path: Path, tensors: dict[str, tuple[int, ...]], dtype: str, itemsize: int) -> int:
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in tensors.items():
        size = numel(shape) * itemsize
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as fh:
        fh.write(len(raw).to_bytes(8, "little"))
        fh.write(raw)
        fh.truncate(8 + len(raw) + offset)  # a hole, not data
    return 8 + len(raw) + offset


def make_hf(folder: Path) -> int:
    sys.path.insert(0, str(REPO))
    from titan_train.checkpoint.formats.naming import ours_to_hf  # torch-free

    folder.mkdir(parents=True)
    names = {ours_to_hf(k)[0]: v for k, v in llama7b_shapes().items()}
    keys = list(names)
    half = len(keys) // 2
    total, weight_map = 0, {}
    for i, part in enumerate((keys[:half], keys[half:]), 1):
        file = f"model-{i:05d}-of-00002.safetensors"
        total += sparse_safetensors(folder / file, {k: names[k] for k in part}, "BF16", 2)
        weight_map.update({k: file for k in part})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (folder / "config.json").write_text(
        json.dumps(
            {
                "hidden_size": DIM,
                "num_attention_heads": 32,
                "num_hidden_layers": LAYERS,
                "intermediate_size": FFN,
                "vocab_size": VOCAB,
                "num_key_value_heads": 32,
            }
        )
    )
    return total


def make_dcp(folder: Path) -> None:
    """A 2-rank DCP save of weights (bf16) + AdamW moments (fp32), each tensor split by rows."""
    import torch
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import (
        ChunkStorageMetadata,
        Metadata,
        MetadataIndex,
        TensorProperties,
        TensorStorageMetadata,
    )

    folder.mkdir(parents=True)
    entries = {}
    for name, shape in llama7b_shapes().items():
        entries[f"model.{name}"] = (shape, torch.bfloat16, 2)
        for moment in ("exp_avg", "exp_avg_sq"):
            entries[f"optim.state.{name}.{moment}"] = (shape, torch.float32, 4)
    sdm, storage, ends = {}, {}, [0, 0]
    for key, (shape, dtype, item) in entries.items():
        rows = shape[0]
        chunks = []
        for rank, (lo, hi) in enumerate(((0, rows // 2), (rows // 2, rows))):
            sizes = (hi - lo,) + tuple(shape[1:])
            offsets = (lo,) + (0,) * (len(shape) - 1)
            chunks.append(ChunkStorageMetadata(offsets=torch.Size(offsets), sizes=torch.Size(sizes)))
            length = numel(sizes) * item + 1024  # + torch.save framing, roughly
            storage[MetadataIndex(key, torch.Size(offsets))] = _StorageInfo(f"__{rank}_0.distcp", ends[rank], length)
            ends[rank] += length
        sdm[key] = TensorStorageMetadata(TensorProperties(dtype=dtype), torch.Size(shape), chunks)
    (folder / ".metadata").write_bytes(pickle.dumps(Metadata(state_dict_metadata=sdm, storage_data=storage)))
    for rank, end in enumerate(ends):
        with open(folder / f"__{rank}_0.distcp", "wb") as fh:
            fh.truncate(end)


def timed(cmd: list[str], runs: int = 3) -> tuple[float, subprocess.CompletedProcess]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    times, proc = [], None
    for _ in range(runs):
        start = time.perf_counter()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times), proc


def peak_rss_mib(cmd: list[str]) -> tuple[float, int]:
    """Peak resident memory of a child process (MiB) and its exit code."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    return usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def make_dense(root: Path, megabytes: int) -> None:
    """Dense fp32 LLaMA-shaped weights of about `megabytes` (+ the trainer config for them)."""
    import torch

    sys.path.insert(0, str(REPO))
    from titan_train.config.model_args import ModelArgs
    from titan_train.models.llama import Transformer

    per_layer = 4 * 1024 * 1024 + 3 * 1024 * 2816  # attention + SwiGLU (d 1024, ffn 2816)
    layers = max(1, round((megabytes * 2**20 / 4 - 2 * 8192 * 1024) / per_layer))
    args = ModelArgs(vocab_size=8192, d_model=1024, n_layers=layers, n_heads=16, multiple_of=256, max_seq_len=128)
    with torch.device("meta"):
        model = Transformer(args)
    torch.save({k: torch.randn(v.shape) for k, v in model.state_dict().items()}, root / "dense.pt")
    (root / "dense.toml").write_text(
        f"[model]\nvocab_size = 8192\nd_model = 1024\nn_layers = {layers}\n"
        "n_heads = 16\nmultiple_of = 256\nmax_seq_len = 128\n"
    )


def convert_memory(root: Path, megabytes: int) -> None:
    """The dense checkpoint converted three ways, each in a fresh process (this one never
    imports torch, so the children's peak memory is their own)."""
    py = sys.executable
    subprocess.run(
        [py, __file__, "--make-dense", str(root), str(megabytes)],
        check=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    src, config = root / "dense.pt", root / "dense.toml"
    size = src.stat().st_size
    base, _ = peak_rss_mib([py, "-c", "import torch, titan_doctor.convert.run"])
    print(f"\nconvert: {size / 2**20:.0f} MiB fp32 source; baseline (python + torch imported): {base:.0f} MiB")
    print(f"{'conversion':<40} {'peak RSS':>10} {'above baseline':>15} {'x source':>9}")
    cases = (
        (
            "torch -> hf (bf16, 256MB shards)",
            ["--to", "hf", "--dtype", "bf16", "--max-shard-size", "256MB", "--config", str(config)],
            "hf",
        ),
        ("torch -> dcp", ["--to", "dcp"], "dcp"),
        ("dcp -> torch (every entry)", ["--to", "torch"], "back.pt"),
    )
    for label, extra, out in cases:
        source = root / "dcp" if out == "back.pt" else src
        rss, rc = peak_rss_mib([py, "-m", "titan_doctor", "convert", str(source), str(root / out), *extra])
        above = rss - base
        print(
            f"{label:<40} {rss:>8.0f} MiB {above:>11.0f} MiB {above * 2**20 / size:>8.2f}x"
            + ("" if rc == 0 else f"   (exit {rc})")
        )
    print(
        "(peak RSS includes the source's mmap'd pages, which are page cache; safetensors' save_file\n"
        " serializes a whole shard in memory, so HF output adds about two shards)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="write the checkpoints here and keep them")
    parser.add_argument("--convert-mb", type=int, default=512, help="size of the dense conversion source (0: skip)")
    parser.add_argument("--make-dcp", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--make-dense", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.make_dcp:  # child process: torch stays out of the measuring parent
        make_dcp(args.make_dcp)
        return
    if args.make_dense:
        make_dense(Path(args.make_dense[0]), int(args.make_dense[1]))
        return
    root = args.keep or Path(tempfile.mkdtemp(prefix="ckpt-bench-"))
    hf, dcp = root / "llama7b-hf", root / "run" / "step-1000"
    print(f"making sparse checkpoints under {root} ...", flush=True)
    subprocess.run(
        [sys.executable, __file__, "--make-dcp", str(dcp)], check=True, env=dict(os.environ, PYTHONPATH=str(REPO))
    )
    sizes = {"hf": make_hf(hf), "dcp": sum(f.stat().st_size for f in dcp.glob("*.distcp"))}
    py = sys.executable
    rows = []
    for label, path, size in (
        ("HF safetensors, index + 2 shards", hf, sizes["hf"]),
        ("trainer DCP step folder, 2 ranks", dcp.parent, sizes["dcp"]),
    ):
        doctor, proc = timed([py, "-m", "titan_doctor", "diagnose", "--checkpoint", str(path)])
        first = proc.stdout.splitlines()[0] if proc.stdout else proc.stderr.strip()[-200:]
        rows.append((label, size, doctor, first))
    startup, _ = timed([py, "-c", "pass"])
    torch_import, _ = timed([py, "-c", "import torch"])
    torch_meta, _ = timed(
        [py, "-c", f"import torch.distributed.checkpoint as d; d.FileSystemReader('{dcp}').read_metadata()"]
    )
    print()
    print(f"{'checkpoint':<36} {'size':>9} {'diagnose --checkpoint':>22}")
    for label, size, seconds, _ in rows:
        print(f"{label:<36} {size / 1e9:>7.1f}GB {seconds:>20.2f} s")
    print()
    print("for comparison (same machine, median of 3 cold processes):")
    print(f"  python -c pass                                      {startup:6.2f} s")
    print(f"  python -c 'import torch'                            {torch_import:6.2f} s")
    print(f"  torch FileSystemReader.read_metadata (DCP, unsafe)  {torch_meta:6.2f} s")
    print()
    for label, _, _, first in rows:
        print(f"{label}: {first}")
    if args.convert_mb:
        convert_memory(root, args.convert_mb)


if __name__ == "__main__":
    main()
