"""The host-side launch description of a GPU function: which buffers the caller passes,
which workspaces the host allocates, and each kernel's grid, block and arguments. It is
all the runtime needs besides the PTX/cubin, and it round-trips through JSON so that an
artifact can launch its kernels without the TIR they came from."""

from __future__ import annotations

from dataclasses import dataclass

from heterocc.sdk import ArtifactError
from heterocc.tir import expr as tx
from heterocc.tir.stmt import BufferStore
from heterocc.tir.visitor import collect

from .passes import GpuFunction


@dataclass(frozen=True)
class Launch:
    """One kernel launch; ``args`` index the plan's buffers (parameters, then workspaces)."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: tuple[int, ...]


@dataclass(frozen=True)
class LaunchPlan:
    """Launches of one function in order over ``params`` (the caller's arrays, of which
    ``written`` are outputs) and ``workspaces`` (device-only intermediates)."""

    name: str
    params: tuple[tx.Buffer, ...]
    workspaces: tuple[tx.Buffer, ...]
    launches: tuple[Launch, ...]
    written: frozenset[int]

    @property
    def buffers(self) -> tuple[tx.Buffer, ...]:
        return self.params + self.workspaces

    def to_json(self) -> dict:
        def buffer(b: tx.Buffer) -> dict:
            return {"name": b.name, "shape": list(b.shape), "dtype": b.dtype}

        return {"name": self.name, "params": [buffer(b) for b in self.params],
                "workspaces": [buffer(b) for b in self.workspaces],
                "launches": [{"kernel": launch.kernel, "grid": list(launch.grid),
                              "block": list(launch.block), "args": list(launch.args)}
                             for launch in self.launches],
                "written": sorted(self.written)}

    @staticmethod
    def from_json(doc: dict) -> LaunchPlan:
        try:
            def buffer(d: dict) -> tx.Buffer:
                return tx.Buffer(str(d["name"]), tuple(int(x) for x in d["shape"]),
                                 str(d["dtype"]))

            params = tuple(buffer(d) for d in doc["params"])
            workspaces = tuple(buffer(d) for d in doc["workspaces"])
            launches = tuple(Launch(str(d["kernel"]), tuple(int(x) for x in d["grid"]),
                                    tuple(int(x) for x in d["block"]),
                                    tuple(int(x) for x in d["args"]))
                             for d in doc["launches"])
            plan = LaunchPlan(str(doc["name"]), params, workspaces, launches,
                              frozenset(int(x) for x in doc["written"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ArtifactError(f"malformed CUDA launch description: {exc!r}") from None
        count = len(plan.buffers)
        if any(not 0 <= a < count for launch in launches for a in launch.args):
            raise ArtifactError(f"CUDA launch description of {plan.name!r} names a buffer "
                                f"outside its {count} buffers")
        return plan


def launch_plan(gpu: GpuFunction) -> LaunchPlan:
    """The launch description of ``gpu``'s kernels."""
    buffers = gpu.params + gpu.workspaces
    position = {b: k for k, b in enumerate(buffers)}
    written = {n.buffer for k in gpu.kernels
               for n in collect(k.body, lambda n: isinstance(n, BufferStore))}
    launches = tuple(Launch(k.name, k.grid, k.block, tuple(position[b] for b in k.params))
                     for k in gpu.kernels)
    return LaunchPlan(gpu.name, gpu.params, gpu.workspaces, launches,
                      frozenset(position[b] for b in gpu.params if b in written))
