"""The parallel layout: data x pipeline x tensor parallel degrees, and the mesh they make.

The one place for "the degrees multiply to the world size". Config validation calls it
before any process starts, the trainer builds its mesh from it, and the memory planner
describes a layout with it. No torch at import.

Data parallel may be HSDP: dp = dp_replicate x dp_shard, FSDP2 sharding within a group of
dp_shard ranks (a node) and replicating across the dp_replicate groups, on a 2-D mesh
("dp_replicate", "dp_shard"), as torchtitan's data_parallel_replicate_degree /
data_parallel_shard_degree make it (pytorch/torchtitan v0.2.2 torchtitan/distributed/
parallel_dims.py). The mesh keeps one "dp" dim, which the data loader, the loss and the
grad norm read; only FSDP sees it split (fsdp_mesh).
"""

from __future__ import annotations

from dataclasses import dataclass

MESH_DIMS = ("dp", "pp", "tp")  # outermost to innermost: tp ranks are neighbours (one node)
HSDP_DIMS = ("dp_replicate", "dp_shard")  # dp split in two: replicas outermost, shards within


class LayoutError(ValueError):
    """Degrees that cannot make a mesh of this world size (one line)."""


@dataclass(frozen=True)
class ParallelDims:
    dp: int
    tp: int = 1
    pp: int = 1
    dp_replicate: int = 1  # HSDP replicas of the dp ranks (1 = plain FSDP over all dp ranks)

    @classmethod
    def of(cls, d, world_size: int) -> ParallelDims:
        """The layout of a [distributed] section (config.job.DistributedConfig) on `world_size` ranks."""
        return cls.for_world(
            world_size, tp=d.tp_size, pp=d.pp_size, dp_replicate=d.dp_replicate_size, dp_shard=d.dp_shard_size
        )

    @classmethod
    def for_world(
        cls, world_size: int, *, tp: int = 1, pp: int = 1, dp_replicate: int = 1, dp_shard: int = 0
    ) -> ParallelDims:
        """dp is what is left of the world after tp and pp; refuse what does not divide.
        dp_shard = 0: what is left of dp after dp_replicate."""
        for key, value in (("tp_size", tp), ("pp_size", pp)):
            if value < 1:
                raise LayoutError(f"distributed.{key} = {value} must be >= 1")
        if world_size % (tp * pp):
            what = (
                f"distributed.tp_size = {tp}"
                if pp == 1
                else f"distributed.pp_size = {pp}"
                if tp == 1
                else f"distributed.tp_size x pp_size = {tp} x {pp} = {tp * pp}"
            )
            raise LayoutError(
                f"{what} must divide the world size {world_size} "
                f"(valid: {', '.join(str(k) for k in range(1, world_size + 1) if world_size % k == 0)})"
            )
        dp = world_size // (tp * pp)
        if dp_replicate < 1 or dp_shard < 0:
            raise LayoutError(
                f"distributed.dp_replicate_size = {dp_replicate} must be >= 1"
                if dp_replicate < 1
                else f"distributed.dp_shard_size = {dp_shard} must be >= 0 (0 = what is left)"
            )
        if dp_shard and dp_replicate * dp_shard * tp * pp != world_size:
            raise LayoutError(
                f"distributed.dp_replicate_size x dp_shard_size x tp_size x pp_size = {dp_replicate} x {dp_shard} "
                f"x {tp} x {pp} = {dp_replicate * dp_shard * tp * pp} must equal the world size {world_size} "
                f"(or set dp_shard_size = 0 for what is left)"
            )
        if dp % dp_replicate:
            raise LayoutError(
                f"distributed.dp_replicate_size = {dp_replicate} must divide the {dp} data-parallel ranks "
                f"(world size {world_size} / (tp_size {tp} x pp_size {pp})); valid: "
                f"{', '.join(str(k) for k in range(1, dp + 1) if dp % k == 0)}"
            )
        dims = cls(dp=dp, tp=tp, pp=pp, dp_replicate=dp_replicate)
        dims.validate(world_size)
        return dims

    def validate(self, world_size: int) -> None:
        for name in MESH_DIMS:
            if getattr(self, name) < 1:
                raise LayoutError(f"{name} degree {getattr(self, name)} must be >= 1")
        if self.world_size != world_size:
            raise LayoutError(
                f"dp {self.dp} x pp {self.pp} x tp {self.tp} = {self.world_size} "
                f"does not match the world size {world_size}"
            )

    @property
    def world_size(self) -> int:
        return self.dp * self.pp * self.tp

    @property
    def dp_shard(self) -> int:
        """The ranks FSDP shards over: all of dp, or one HSDP replica's."""
        return self.dp // self.dp_replicate

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.dp, self.pp, self.tp

    def describe(self) -> str:
        hsdp = f" (replicate {self.dp_replicate} x shard {self.dp_shard})" if self.dp_replicate > 1 else ""
        return f"dp {self.dp}{hsdp} x pp {self.pp} x tp {self.tp}"

    def uses_fsdp(self, fsdp: bool, cpu_offload: bool) -> bool:
        """FSDP only where it does something: sharding over dp > 1 ranks, or offloading.
        On one data-parallel rank it would only add copies to every step."""
        return fsdp and (self.dp > 1 or cpu_offload)

    def build_mesh(self, device_type: str):
        """The 3-D DeviceMesh (dp, pp, tp); the process group must already exist. The mesh
        is real even under FakeTensorMode (the memory planner): it holds ranks, not data.
        Under HSDP too: mesh["dp"] stays the data-parallel group, fsdp_mesh splits it."""
        from torch._subclasses.fake_tensor import unset_fake_temporarily
        from torch.distributed.device_mesh import init_device_mesh

        with unset_fake_temporarily():
            return init_device_mesh(device_type, self.shape, mesh_dim_names=MESH_DIMS)


def fsdp_mesh(mesh, dp_replicate: int = 1):
    """What FSDP2 shards over: mesh["dp"], or under HSDP that dim unflattened into the 2-D
    (dp_replicate, dp_shard) mesh, on which FSDP2 shards over the inner dim and replicates
    over the outer (each call makes its two process groups)."""
    if dp_replicate == 1:
        return mesh["dp"]
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        return mesh["dp"]._unflatten(0, (dp_replicate, mesh["dp"].size() // dp_replicate), HSDP_DIMS)


def stage_layers(n_layers: int, n_stages: int) -> list[list[int]]:
    """Layer ids of each pipeline stage, as even as possible; earlier stages take the
    remainder (the last stage also carries the output projection)."""
    base, extra = divmod(n_layers, n_stages)
    out, start = [], 0
    for s in range(n_stages):
        size = base + (1 if s < extra else 0)
        out.append(list(range(start, start + size)))
        start += size
    return out
