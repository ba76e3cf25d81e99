"""Real checkpoints for the checkpoint tests, written the way each tool writes them, with
real torch: the trainer's DCP layout, torch.save dicts, HF safetensors, Meta
consolidated.NN.pth, DeepSpeed folders, and malicious pickles.

The HF and Meta writers here are independent of titan_train.checkpoint.formats: names are
typed out and the q/k permutation is HF's conversion-script formula, so the tests check the
code under test against the formats, not against itself.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import torch

from titan_train.config.model_args import ModelArgs
from titan_train.models.llama import Transformer

REPO = Path(__file__).resolve().parents[1]
TINY = ModelArgs(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, multiple_of=16, max_seq_len=16)


def weights(args: ModelArgs = TINY, seed: int = 11) -> dict[str, torch.Tensor]:
    model = Transformer(args)
    model.init_weights(seed)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def hf_permute(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """transformers' convert_llama_weights_to_hf.py `permute` (Meta -> HF rotary order)."""
    dim1, dim2 = w.shape
    return w.view(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(1, 2).reshape(dim1, dim2)


def hf_state_dict(sd: dict[str, torch.Tensor], args: ModelArgs = TINY) -> dict[str, torch.Tensor]:
    out = {
        "model.embed_tokens.weight": sd["tok_embeddings.weight"],
        "model.norm.weight": sd["norm.weight"],
        "lm_head.weight": sd["output.weight"],
    }
    for i in range(args.n_layers):
        p, h = f"layers.{i}.", f"model.layers.{i}."
        out[h + "self_attn.q_proj.weight"] = hf_permute(sd[p + "attention.wq.weight"], args.n_heads)
        out[h + "self_attn.k_proj.weight"] = hf_permute(sd[p + "attention.wk.weight"], args.kv_heads)
        out[h + "self_attn.v_proj.weight"] = sd[p + "attention.wv.weight"]
        out[h + "self_attn.o_proj.weight"] = sd[p + "attention.wo.weight"]
        out[h + "mlp.gate_proj.weight"] = sd[p + "feed_forward.w1.weight"]
        out[h + "mlp.down_proj.weight"] = sd[p + "feed_forward.w2.weight"]
        out[h + "mlp.up_proj.weight"] = sd[p + "feed_forward.w3.weight"]
        out[h + "input_layernorm.weight"] = sd[p + "attention_norm.weight"]
        out[h + "post_attention_layernorm.weight"] = sd[p + "ffn_norm.weight"]
    return out


def hf_config(args: ModelArgs = TINY, **extra) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": args.d_model,
        "intermediate_size": args.ffn_dim,
        "num_attention_heads": args.n_heads,
        "num_hidden_layers": args.n_layers,
        "num_key_value_heads": args.kv_heads,
        "rms_norm_eps": args.norm_eps,
        "rope_theta": args.rope_theta,
        "vocab_size": args.vocab_size,
        "max_position_embeddings": args.max_seq_len,
        **extra,
    }


def write_hf(
    folder: Path,
    sd: dict[str, torch.Tensor],
    args: ModelArgs = TINY,
    *,
    shards: int = 1,
    dtype: torch.dtype = torch.float32,
    config: bool = True,
) -> Path:
    """HF layout: model.safetensors, or model-0000i-of-0000n.safetensors + index."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    hf = {k: v.to(dtype).contiguous() for k, v in hf_state_dict(sd, args).items()}
    names = list(hf)
    if shards == 1:
        save_file(hf, str(folder / "model.safetensors"), metadata={"format": "pt"})
    else:
        weight_map = {}
        for i in range(shards):
            part = names[i::shards]
            file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
            save_file({n: hf[n] for n in part}, str(folder / file), metadata={"format": "pt"})
            weight_map.update({n: file for n in part})
        (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    if config:
        (folder / "config.json").write_text(json.dumps(hf_config(args)))
    return folder


META_DIM = {"wq": 0, "wk": 0, "wv": 0, "wo": 1, "w1": 0, "w3": 0, "w2": 1}


def write_meta(
    folder: Path, sd: dict[str, torch.Tensor], args: ModelArgs = TINY, *, shards: int = 2, llama3: bool = False
) -> Path:
    """consolidated.NN.pth as Meta's model-parallel code saves them (column-parallel weights
    split on dim 0, row-parallel on dim 1, the embedding on dim 1 (LLaMA 1/2) or dim 0
    (LLaMA 3), norms replicated) + params.json (LLaMA 2 writes vocab_size -1)."""
    folder.mkdir(parents=True, exist_ok=True)
    parts = [dict() for _ in range(shards)]
    for name, t in sd.items():
        leaf = name.split(".")[-2]
        if name == "tok_embeddings.weight":
            dim = 0 if llama3 else 1
        elif name == "output.weight":
            dim = 0
        else:
            dim = META_DIM.get(leaf)
        pieces = t.chunk(shards, dim=dim) if dim is not None else [t] * shards
        for part, piece in zip(parts, pieces):
            part[name] = piece.clone()
    for i, part in enumerate(parts):
        part["rope.freqs"] = torch.ones(args.head_dim // 2)
        torch.save(part, folder / f"consolidated.{i:02d}.pth")
    params = {
        "dim": args.d_model,
        "n_layers": args.n_layers,
        "n_heads": args.n_heads,
        "n_kv_heads": args.kv_heads,
        "multiple_of": args.multiple_of,
        "norm_eps": args.norm_eps,
        "vocab_size": -1,
    }
    (folder / "params.json").write_text(json.dumps(params))
    return folder


def write_deepspeed(folder: Path, sd: dict[str, torch.Tensor], *, step: int = 5, stage: int = 2) -> Path:
    """DeepSpeed's layout (deepspeed/runtime/engine.py _save_checkpoint / _get_ckpt_name):
    <folder>/latest holding the tag, <folder>/global_stepN/ with the model states file(s)
    (module + bookkeeping) and per-rank ZeRO optimizer partitions."""
    tag = folder / f"global_step{step}"
    tag.mkdir(parents=True, exist_ok=True)
    (folder / "latest").write_text(f"global_step{step}")
    shapes = [{k: v.shape for k, v in sd.items()}]
    module = {k: (torch.empty(0, dtype=v.dtype) if stage == 3 else v.to(torch.bfloat16)) for k, v in sd.items()}
    states = {
        "module": module,
        "buffer_names": [],
        "optimizer": None,
        "param_shapes": shapes,
        "lr_scheduler": {"last_epoch": step},
        "global_steps": step,
        "global_samples": step * 8,
        "dp_world_size": 2,
        "mp_world_size": 1,
        "ds_config": {"zero_optimization": {"stage": stage}},
        "ds_version": "0.16.4",
        "skipped_steps": 0,
    }
    name = "zero_pp_rank_{}_mp_rank_00_model_states.pt" if stage == 3 else "mp_rank_00_model_states.pt"
    for rank in range(2 if stage == 3 else 1):
        torch.save(states, tag / name.format(rank))
    for rank in range(2):
        torch.save(
            {
                "optimizer_state_dict": {"zero_stage": stage, "partition_count": 2},
                "ds_config": states["ds_config"],
                "ds_version": "0.16.4",
            },
            tag / f"bf16_zero_pp_rank_{rank}_mp_rank_00_optim_states.pt",
        )
    return folder


def write_trainer_dcp(
    folder: Path, sd: dict[str, torch.Tensor], *, step: int, legacy: bool = False, optimizer: bool = True
) -> Path:
    """A `step-N` folder in the trainer's DCP layout, written through the trainer's own
    Stateful objects: model.<fqn>, optim.state.<fqn>.<name> (flat), progress.*. `legacy`: the
    layout before issue 8 (everything under train., the optimizer nested)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    from titan_train.checkpoint.manager import ModelState
    from titan_train.components.optim import OptimizerParts
    from titan_train.step import Progress

    model = Transformer(TINY)
    model.load_state_dict(sd)
    progress = Progress()
    progress.step, progress.samples = step, 8 * step
    optim = OptimizerParts([model], lambda params: torch.optim.AdamW(params, lr=0.0))  # real moments, same weights
    if optimizer:
        model(torch.zeros(1, 4, dtype=torch.long)).sum().backward()
        optim.step()
    path = folder / f"step-{step}"
    if legacy:
        content = {"model": model.state_dict(), "progress": {"step": step, "samples": 8 * step}}
        if optimizer:
            content["model"], content["optim"] = get_state_dict(model, optim.optimizers[0])
        dcp.save({"train": content}, checkpoint_id=str(path), no_dist=True)
        return path
    states = {"model": ModelState([model]), "progress": progress, **({"optim": optim} if optimizer else {})}
    dcp.save(states, checkpoint_id=str(path), no_dist=True)
    return path


# ---- malicious pickles -------------------------------------------------------------------


class Payload:
    """Unpickling this runs `touch <marker>`: the classic os.system payload."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def malicious_torch_file(path: Path, marker: Path) -> Path:
    """A real torch.save archive: real weights plus one entry that runs a command when loaded."""
    torch.save({**weights(), "extra": Payload(marker)}, path)
    return path


def malicious_metadata(folder: Path, marker: Path) -> Path:
    """A real DCP folder whose .metadata runs a command when torch's FileSystemReader reads it."""
    import torch.distributed.checkpoint as dcp

    dcp.save({"model": weights()}, checkpoint_id=str(folder), no_dist=True)
    meta = folder / ".metadata"
    real = pickle.loads(meta.read_bytes())
    real.planner_data = {"note": Payload(marker)}  # rides along with genuine metadata
    meta.write_bytes(pickle.dumps(real))
    return folder


def runs_code_when_loaded(code: str, marker: Path) -> bool:
    """Does `code` (in a fresh interpreter) create `marker`? The control for every malicious file."""
    marker.unlink(missing_ok=True)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    created = marker.exists()
    marker.unlink(missing_ok=True)
    return created


def imports_torch(code: str) -> bool:
    """Does running `code` in a fresh interpreter import torch? (the doctor's fast paths must not)"""
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys; print('torch' in sys.modules)"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1] == "True"


def doctor_convert(*args) -> subprocess.CompletedProcess:
    """`titan-doctor convert ARGS` in a real process, as a user runs it; never a traceback."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, "-m", "titan_doctor", "convert", *map(str, args)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc
