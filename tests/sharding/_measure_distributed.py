"""Statistics divided across devices (issue 22 §2): what each of 8 devices stores, computes and sends.

Run: ``XLA_FLAGS=--xla_force_host_platform_device_count=8 python tests/sharding/_measure_distributed.py
[DEPTH [NAMES|all [replicated]]]`` (not a test: it prints a Markdown table; docs/sharding.md quotes
it). The parameters are ``DEPTH`` transformer-like layers of 7 leaves (q, k, v, o 64x64, up 64x256,
down 256x64, a 64-vector; benchmarks/cases/matrix_depth.py), every leaf sharded ``P("fsdp", None)``
over an 8-device mesh (``replicated``: every leaf ``P()``, data parallelism), the update alone
(gradients given) jitted under explicit mesh axes and under automatic ones set by ``jax.set_mesh``
(both in the owner layout; automatic axes divide over the whole mesh). Per optimizer:

* **statistic bytes**: the matrix state (SOAP's statistics and eigenbases, Shampoo's statistics and
  inverse roots, PSGD's dense factors, Muon's momentum, GaLore's projectors and low-rank moments)
  held by the busiest device, against the total (the arrays' shards after a step);
* **memory**: ``compiled.memory_analysis()`` of the per-device program (arguments, outputs, temporaries);
* **FLOPs**: ``compiled.cost_analysis()["flops"]`` of the per-device program against the same update
  compiled for one device (XLA counts no FLOPs for LAPACK custom calls: the eigendecompositions
  are not in it; the matrices each device preconditions, eigendecompositions included, are
  ``ceil(n / 8)`` of each group of ``n`` in the owner layout, all of them under automatic axes);
* **collectives**: count and bytes per device per step (results of the collectives).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import steadax  # noqa: E402
from benchmarks.cases.matrix_depth import layers  # noqa: E402

OPTIMIZERS = {
    "muon": lambda: steadax.contrib.muon(1e-3),
    "soap": lambda: steadax.soap(1e-3, precondition_frequency=1),
    "shampoo": lambda: steadax.shampoo(1e-3, precondition_frequency=1),
    "psgd_kron": lambda: steadax.psgd_kron(1e-3, preconditioner_update_probability=1.0),
    "galore": lambda: steadax.contrib.galore(1e-3, rank=16, update_proj_gap=1),
}
# The state fields holding each optimizer's matrix statistics.
FIELDS = {"muon": ("mu",), "soap": ("statistics", "eigenbases"), "shampoo": ("statistics", "preconditioners"),
          "psgd_kron": ("preconditioner",), "galore": ("projector", "mu", "nu")}


def statistic_leaves(name, state):
  out = []
  for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
    names = {getattr(k, "name", None) for k in path}
    if names & set(FIELDS[name]) and leaf.ndim >= 2 and leaf.size:
      out.append(leaf)
  return out


def per_device_bytes(leaves) -> tuple[int, int]:
  """(bytes on the busiest device, total bytes) of sharded arrays."""
  by_device: dict = {}
  total = 0
  for leaf in leaves:
    total += leaf.nbytes
    for shard in leaf.addressable_shards:
      by_device[shard.device] = by_device.get(shard.device, 0) + shard.data.nbytes
  return max(by_device.values()), total


OPS = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")
_BYTES = {"f32": 4, "f64": 8, "bf16": 2, "f16": 2, "s32": 4, "u32": 4, "pred": 1, "u8": 1, "s8": 1, "c64": 8}


def collectives(hlo: str) -> dict:
  """``{op: (count, bytes)}`` of a program's collectives: result sizes per device (tuple results,
  whose ``/*index=5*/`` comments hold an ``=``, included; async pairs counted once)."""
  out: dict = {}
  for line in hlo.splitlines():
    line = re.sub(r"/\*.*?\*/", "", line)
    for op in OPS:
      match = re.search(r"= (.*?) " + op + r"(-start)?\(", line)
      if match:
        size = sum(int(np.prod([int(d) for d in dims.split(",") if d] or [1])) * _BYTES.get(dtype, 4)
                   for dtype, dims in re.findall(r"(\w+)\[([\d,]*)\]", match.group(1)))
        count, total = out.get(op, (0, 0))
        out[op] = (count + 1, total + size)
  return out


def owned(depth: int, devices: int = 8) -> tuple[int, int]:
  """(matrices per device, matrices in all): the owner layout gives each device ``ceil(n / 8)``
  members of each group of ``n`` (padded); every matrix of a member is decomposed on its owner."""
  groups = {}
  for leaf in jax.tree.leaves(layers(depth)):
    if leaf.ndim == 2:
      groups[leaf.shape] = groups.get(leaf.shape, 0) + 1
  return sum(-(-n // devices) for n in groups.values()), sum(groups.values())


def measure(name, depth, kind, replicated=False):
  mesh = jax.make_mesh((8,), ("fsdp",), axis_types=(getattr(AxisType, kind),))
  spec = (lambda x: P()) if replicated else (lambda x: P("fsdp", *(None,) * (x.ndim - 1)))
  params = jax.tree.map(lambda x: jax.device_put(x, NamedSharding(mesh, spec(x))), layers(depth))
  rng = np.random.default_rng(0)
  grads = jax.tree.map(lambda p: jax.device_put(rng.normal(size=p.shape).astype(np.float32), p.sharding), params)
  with jax.set_mesh(mesh):
    tx = OPTIMIZERS[name]()
    state = jax.jit(tx.init)(params)
    step = jax.jit(lambda g, s, p: tx.update(g, s, p))
    compiled = step.lower(grads, state, params).compile()
    _, state = compiled(grads, state, params)
    jax.block_until_ready(state)
  hlo = compiled.as_text()
  memory = compiled.memory_analysis()
  return {"bytes": per_device_bytes(statistic_leaves(name, state)), "flops": compiled.cost_analysis()["flops"],
          "collectives": collectives(hlo),
          "memory": (memory.argument_size_in_bytes, memory.output_size_in_bytes, memory.temp_size_in_bytes)}


def single(name, depth):
  """The same update compiled for one device: its FLOPs."""
  device = jax.devices()[0]
  params = jax.tree.map(lambda x: jax.device_put(x, device), layers(depth))
  tx = OPTIMIZERS[name]()
  state = jax.jit(tx.init)(params)
  compiled = jax.jit(lambda g, s, p: tx.update(g, s, p)).lower(params, state, params).compile()
  return {"flops": compiled.cost_analysis()["flops"]}


def kib(b):
  return f"{b / 1024:.0f} KiB"


def main() -> None:
  assert jax.device_count() == 8, "set XLA_FLAGS=--xla_force_host_platform_device_count=8"
  depth = int(sys.argv[1]) if len(sys.argv) > 1 else 8
  names = sys.argv[2].split(",") if len(sys.argv) > 2 and sys.argv[2] != "all" else list(OPTIMIZERS)
  replicated = sys.argv[3:] == ["replicated"]  # data parallelism: every leaf whole on every device
  layout = "P()" if replicated else "P('fsdp', None)"
  print(f"{depth} layers of 7 leaves, every leaf {layout} over 8 devices; per device / total.")
  print("| optimizer | mesh axes | statistic bytes (busiest device / total) | FLOPs per device / one-device total "
        "| matrices per device / total | collectives per step (per device) | memory per device: args, out, temp |")
  print("|---|---|---|---|---|---|---|")
  for name in names:
    one = single(name, depth)
    for kind in ("Explicit", "Auto"):
      r = measure(name, depth, kind, replicated)
      busiest, total = r["bytes"]
      coll = ", ".join(f"{n} {op} ({b / 1024:.0f} KiB)" for op, (n, b) in sorted(r["collectives"].items())) or "none"
      # Explicit axes divide over the parameters' axes (none when replicated), automatic ones over
      # the whole mesh.
      mine, total_matrices = owned(depth, 1) if replicated and kind == "Explicit" else owned(depth)
      eigh = f"{mine} / {total_matrices}"
      print(f"| {name} | {kind} | {kib(busiest)} / {kib(total)} ({busiest / total:.3f}) | "
            f"{r['flops'] / 1e6:.1f}M / {one['flops'] / 1e6:.1f}M ({r['flops'] / one['flops']:.3f}) | {eigh} | {coll} | "
            f"{', '.join(kib(m) for m in r['memory'])} |", flush=True)


if __name__ == "__main__":
  main()
