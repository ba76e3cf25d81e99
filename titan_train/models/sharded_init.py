"""Weight init whose work and memory on a rank are proportional to that rank's shard.

Drawing every full parameter and slicing it (what a naive init does) costs each rank of a
70B job ~70 billion random draws. Instead each parameter is cut into fixed tiles of
TILE_ROWS x TILE_COLS, and tile (i, j) of parameter `key` is drawn from its own generator,
seeded from (seed, key, i, j). Tiles are short and wide because FSDP cuts rows finely
(8192 rows over 64 ranks = 128) while tensor parallel cuts columns coarsely (tp <= 8). A rank draws only the tiles its shard overlaps and keeps the overlap.
Because a value depends only on its global position, 1 rank, FSDP, TP and every PP stage
start from identical weights, which is what the parity tests rely on.
"""

from __future__ import annotations

import hashlib

import torch
from torch import nn

TILE_ROWS, TILE_COLS = 32, 512
# Module wrappers that insert a name into parameter FQNs; DCP's state-dict helpers drop the
# same prefixes, so init keys and checkpoint keys agree.
_WRAPPER_PREFIXES = ("_checkpoint_wrapped_module.", "_orig_mod.", "_fsdp_wrapped_module.")


def stable_name(fqn: str) -> str:
    """The parameter's name in the unwrapped model (`layers.0.attention.wq.weight`)."""
    for prefix in _WRAPPER_PREFIXES:
        fqn = fqn.replace(prefix, "")
    return fqn


def shard_box(param: torch.Tensor) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(global shape, this rank's local shape, its offset in the global tensor)."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    if not isinstance(param, DTensor):
        return tuple(param.shape), tuple(param.shape), (0,) * param.dim()
    local_shape, offset = compute_local_shape_and_global_offset(param.shape, param.device_mesh, param.placements)
    return tuple(param.shape), tuple(local_shape), tuple(offset)


def _tile_generator(seed: int, key: str, i: int, j: int) -> torch.Generator:
    digest = hashlib.blake2b(f"{seed}|{key}|{i}|{j}".encode(), digest_size=8).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest, "little"))


def fill_trunc_normal_(
    out: torch.Tensor, global_shape: tuple[int, ...], offset: tuple[int, ...], *, std: float, seed: int, key: str
) -> int:
    """Fill `out` (a CPU float32 block of a `global_shape` tensor, starting at `offset`) with
    N(0, std) truncated at 3 std, tile by tile. Returns the number of values drawn: the
    block's size plus, at most, one partial tile along each border."""
    if len(global_shape) > 2:
        raise ValueError(f"{key}: tiled init handles 1-D and 2-D parameters, not shape {tuple(global_shape)}")
    rows, cols = global_shape[0], (global_shape[1] if len(global_shape) == 2 else 1)
    (r0, c0), view = (offset + (0,))[:2], out.view(out.shape[0], -1)
    r1, c1 = r0 + view.shape[0], c0 + view.shape[1]
    drawn = 0
    for i in range(r0 // TILE_ROWS, -(-r1 // TILE_ROWS)):  # the tiles the block overlaps
        for j in range(c0 // TILE_COLS, -(-c1 // TILE_COLS)):
            tr0, tc0 = i * TILE_ROWS, j * TILE_COLS
            tile = torch.empty(min(TILE_ROWS, rows - tr0), min(TILE_COLS, cols - tc0))
            nn.init.trunc_normal_(tile, std=std, a=-3 * std, b=3 * std, generator=_tile_generator(seed, key, i, j))
            drawn += tile.numel()
            lo_r, hi_r, lo_c, hi_c = (
                max(r0, tr0),
                min(r1, tr0 + tile.shape[0]),
                max(c0, tc0),
                min(c1, tc0 + tile.shape[1]),
            )
            view[lo_r - r0 : hi_r - r0, lo_c - c0 : hi_c - c0] = tile[lo_r - tr0 : hi_r - tr0, lo_c - tc0 : hi_c - tc0]
    return drawn


def init_param_(param: torch.Tensor, *, std: float | None, seed: int, key: str) -> int:
    """Fill this rank's shard of `param` (plain tensor or DTensor): ones when `std` is None,
    else the tiled truncated normal. Returns the number of random values drawn."""
    local = param.to_local() if hasattr(param, "to_local") else param
    if std is None:
        local.fill_(1.0)
        return 0
    if local.numel() == 0 or local.is_meta or _is_fake(local):
        return 0
    global_shape, local_shape, offset = shard_box(param)
    staging = torch.empty(local_shape, dtype=torch.float32)
    drawn = fill_trunc_normal_(staging, global_shape, offset, std=std, seed=seed, key=key)
    local.copy_(staging)
    return drawn


def _is_fake(t: torch.Tensor) -> bool:
    """Under FakeTensorMode (the memory planner) there is nothing to draw."""
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(t, FakeTensor)
