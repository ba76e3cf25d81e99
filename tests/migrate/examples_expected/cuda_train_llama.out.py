"""A small CUDA-style LLaMA trainer with FSDP2 + tensor parallel: the demo input of
`titan-doctor migrate` (see the quickstart). Written the way CUDA code usually is, so the
migration has something real to do; run it on GPUs with examples/cuda_launch.sh.
"""
from __future__ import annotations

import argparse
import math
import os
import time

import torch
import torch_npu
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                               parallelize_module)
from torch_npu.profiler import ProfilerActivity, profile, schedule


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Block(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.attn_norm, self.ffn_norm = RMSNorm(dim), RMSNorm(dim)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        self.w1 = nn.Linear(dim, 4 * dim, bias=False)
        self.w3 = nn.Linear(dim, 4 * dim, bias=False)
        self.w2 = nn.Linear(4 * dim, dim, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        h = self.attn_norm(x)
        q, k, v = (w(h).view(b, t, -1, x.shape[-1] // self.heads).transpose(1, 2)
                   for w in (self.wq, self.wk, self.wv))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(out.transpose(1, 2).reshape(b, t, -1))
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Llama(nn.Module):
    def __init__(self, vocab: int = 32000, dim: int = 512, layers: int = 4, heads: int = 8):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.out = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.out(self.norm(x))


def parallelize(model: Llama, mesh) -> Llama:
    for block in model.layers:
        plan = {name: ColwiseParallel() for name in ("wq", "wk", "wv", "w1", "w3")}
        plan.update(wo=RowwiseParallel(), w2=RowwiseParallel())
        parallelize_module(block, mesh["tp"], plan)
        fully_shard(block, mesh=mesh["dp"], mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16))
    fully_shard(model, mesh=mesh["dp"])
    return model


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--tp", type=int, default=2)
    parser.add_argument("--resume", default="")
    args = parser.parse_args()

    os.environ.setdefault("PYTORCH_NPU_ALLOC_CONF", "expandable_segments:True")
    os.environ["TORCH_HCCL_ASYNC_ERROR_HANDLING"] = "1"
    dist.init_process_group(backend="hccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.npu.set_device(local_rank)
    device = torch.device("npu", local_rank)
    torch.npu.matmul.allow_hf32 = True
    torch.npu.conv.allow_hf32 = True
    torch.backends.cudnn.benchmark = True

    world = dist.get_world_size()
    mesh = init_device_mesh("npu", (world // args.tp, args.tp), mesh_dim_names=("dp", "tp"))
    with torch.device("meta"):
        model = Llama()
    model = parallelize(model, mesh)
    model.to_empty(device="npu")
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.02)
    if args.resume:
        model.load_state_dict(torch.load(args.resume, map_location=f"npu:{local_rank}"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)

    prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.NPU],
                   schedule=schedule(wait=5, warmup=2, active=3))
    prof.start()
    for step in range(args.steps):
        torch_npu.npu.mstx.range_push(f"step {step}")
        tokens = torch.randint(0, 32000, (4, 256), device=device)
        start = time.perf_counter()
        with torch.autocast("npu", dtype=torch.bfloat16):
            logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.npu.synchronize()
        torch_npu.npu.mstx.range_pop()
        prof.step()
        if dist.get_rank() == 0 and loss.device.type == "npu":
            mem = torch.npu.max_memory_allocated() / 2**30
            print(f"step {step} loss {loss.item():.3f} ppl {math.exp(loss.item()):.1f} "
                  f"{time.perf_counter() - start:.3f}s mem {mem:.1f}GiB")
    prof.stop()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
