"""The parallel layout: data x pipeline x tensor parallel degrees, and the mesh they make.

The one place for "the degrees multiply to the world size". Config validation calls it
before any process starts, the trainer builds its mesh from it, and the memory planner
describes a layout with it. No torch at import.
"""

from __future__ import annotations

from dataclasses import dataclass

MESH_DIMS = ("dp", "pp", "tp")  # outermost to innermost: tp ranks are neighbours (one node)


class LayoutError(ValueError):
    """Degrees that cannot make a mesh of this world size (one line)."""


@dataclass(frozen=True)
class ParallelDims:
    dp: int
    tp: int = 1
    pp: int = 1

    @classmethod
    def for_world(cls, world_size: int, *, tp: int = 1, pp: int = 1) -> ParallelDims:
        """dp is what is left of the world after tp and pp; refuse what does not divide."""
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
        dims = cls(dp=world_size // (tp * pp), tp=tp, pp=pp)
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
    def shape(self) -> tuple[int, int, int]:
        return self.dp, self.pp, self.tp

    def describe(self) -> str:
        return f"dp {self.dp} x pp {self.pp} x tp {self.tp}"

    def uses_fsdp(self, fsdp: bool, cpu_offload: bool) -> bool:
        """FSDP only where it does something: sharding over dp > 1 ranks, or offloading.
        On one data-parallel rank it would only add copies to every step."""
        return fsdp and (self.dp > 1 or cpu_offload)

    def build_mesh(self, device_type: str):
        """The 3-D DeviceMesh (dp, pp, tp); the process group must already exist. The mesh
        is real even under FakeTensorMode (the memory planner): it holds ranks, not data."""
        from torch._subclasses.fake_tensor import unset_fake_temporarily
        from torch.distributed.device_mesh import init_device_mesh

        with unset_fake_temporarily():
            return init_device_mesh(device_type, self.shape, mesh_dim_names=MESH_DIMS)


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
