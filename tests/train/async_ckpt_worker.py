"""One rank of the async-save test (started through titan_train.runtime.launch): FSDP2 on gloo,
save step 2 asynchronously, train on while it is written, then load it back and compare."""

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict  # noqa: E402
from torch.distributed.fsdp import fully_shard  # noqa: E402

from titan_train.checkpoint import manager as checkpoint  # noqa: E402
from titan_train.models.llama import ModelArgs, Transformer  # noqa: E402
from titan_train.step import Progress  # noqa: E402


def build():
    args = ModelArgs(vocab_size=64, d_model=32, n_layers=2, n_heads=4, multiple_of=16, max_seq_len=16)
    model = Transformer(args)
    model.init_weights(0)
    for block in model.layers.values():
        fully_shard(block)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    progress = Progress()
    # the trainer's own top-level keys for the model and the progress (train_states)
    return model, opt, {"model": checkpoint.ModelState([model]), "progress": progress}, progress


def train_step(model, opt, progress, rank):
    g = torch.Generator().manual_seed(100 * progress.step + rank)
    tokens = torch.randint(0, 64, (2, 17), generator=g)
    F.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten()).backward()
    opt.step()
    opt.zero_grad()
    progress.advance(2)


def full(model):
    sd = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    return {k: v.clone() for k, v in sd.items()}


def main():
    rank = int(os.environ["RANK"])
    folder = Path(os.environ["CKPT_DIR"])
    dist.init_process_group("gloo")
    model, opt, state, progress = build()
    group = checkpoint.async_group()
    for _ in range(2):
        train_step(model, opt, progress, rank)
    at_save = full(model)
    pending = checkpoint.start_async_save(folder, 2, state, group)
    named_early = (folder / "step-2").exists()
    for _ in range(2):  # training goes on while the write is in flight
        train_step(model, opt, progress, rank)
    moved = any(not torch.equal(at_save[k], v) for k, v in full(model).items())
    final = checkpoint.finish_async_save(pending)
    model2, _, state2, progress2 = build()
    checkpoint.load(final, state2)
    loaded = full(model2)
    same = all(torch.equal(at_save[k], loaded[k]) for k in at_save)
    report = {
        "named_early": named_early,
        "moved": moved,
        "same": same,
        "step": progress2.step,
        "final": str(final),
        "tmp_left": (folder / "step-2.tmp").exists(),
    }
    (folder.parent / f"async_rank{rank}.json").write_text(json.dumps(report))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
