"""Collectives per optimizer step, counted in the compiled program (the figures of docs/sharding.md).

Run: ``XLA_FLAGS=--xla_force_host_platform_device_count=8 python tests/sharding/_measure_collectives.py``
(not a test: it prints a Markdown table). Each family updates one 128x64 float32 weight sharded
``P("data", "model")`` over a 4x2 mesh (each device holds a 32x32 block, 4 KiB of the 32 KiB
weight) and a 64-vector sharded ``P("model")``; the step is ``update`` alone (gradients given),
jitted, under automatic and under explicit mesh axes. Bytes are the sizes of the collectives'
results per device (an all-gather's result is the gathered array).

Muon is measured three ways: the gather-once iteration steadax uses, the same iteration on the
sharded matrix (the partitioner places collectives inside every Newton-Schulz step: Optax's
``scale_by_muon``, which has no gather), and a layer-parallel layout (8 stacked 32x32 weights, the
stack axis sharded: each device orthogonalizes its own matrix).
"""

from __future__ import annotations

import re
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import steadax

OPS = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")
_BYTES = {"f32": 4, "f64": 8, "bf16": 2, "f16": 2, "s32": 4, "u32": 4, "pred": 1, "u8": 1, "s8": 1, "c64": 8}


def collectives(hlo: str) -> dict:
  """``{op: (count, bytes)}`` over the program's collectives (async pairs counted once)."""
  out = {}
  for line in hlo.splitlines():
    for op in OPS:
      match = re.search(r"= (\(?[^=]*?\)?) " + op + r"(-start)?\(", line)
      if match:
        size = 0
        for dtype, dims in re.findall(r"(\w+)\[([\d,]*)\]", match.group(1)):
          size += int(np.prod([int(d) for d in dims.split(",") if d] or [1])) * _BYTES.get(dtype, 4)
        count, total = out.get(op, (0, 0))
        out[op] = (count + 1, total + size)
  return out


def measure(tx, params, mesh, steps=3, with_params=True):
  grads = jax.tree.map(lambda x: x * 0.5 + 0.01, params)
  with jax.set_mesh(mesh):
    state = jax.jit(tx.init)(params)
    step = jax.jit(lambda g, s, p: tx.update(g, s, p if with_params else None))
    compiled = step.lower(grads, state, params).compile()
    found = collectives(compiled.as_text())
    # Two warm-up steps through jit (a state whose layout changed at the first step, as Optax's
    # muon momentum does, recompiles once), then the timed steps.
    u, s = step(grads, state, params)
    u, s = step(grads, s, params)
    jax.block_until_ready(u)
    start = time.perf_counter()
    for _ in range(steps):
      u, s = step(grads, s, params)
    jax.block_until_ready(u)
  layout = {k: str(v.sharding.spec) for k, v in u.items()}
  return found, (time.perf_counter() - start) / steps * 1e3, layout


def fmt(found: dict) -> str:
  if not found:
    return "none"
  return ", ".join(f"{n} {op} ({b / 1024:.1f} KiB)" for op, (n, b) in sorted(found.items()))


def main() -> None:
  assert jax.device_count() == 8, "set XLA_FLAGS=--xla_force_host_platform_device_count=8"
  rng = np.random.default_rng(0)
  families = [
      ("adamw", lambda: steadax.adamw(1e-3, weight_decay=0.1)),
      ("adafactor (factored)", lambda: steadax.adafactor(1e-3, min_dim_size_to_factor=32)),
      ("sm3", lambda: steadax.sm3(1e-3)),
      ("muon (gather once)", lambda: steadax.contrib.muon(1e-3)),
      ("soap", lambda: steadax.soap(1e-3)),
      ("shampoo", lambda: steadax.shampoo(1e-3, block_size=128)),
      ("galore (rank 16)", lambda: steadax.contrib.galore(1e-3, rank=16)),
      ("psgd_kron", lambda: steadax.psgd_kron(1e-3)),
  ]
  print("| family | mesh axes | collectives per step | update layout | ms/step |")
  print("|---|---|---|---|---|")
  for kind in ("Auto", "Explicit"):
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(getattr(AxisType, kind),) * 2)
    params = {"w": jax.device_put(jnp.asarray(rng.normal(size=(128, 64)), jnp.float32),
                                  NamedSharding(mesh, P("data", "model"))),
              "b": jax.device_put(jnp.asarray(rng.normal(size=(64,)), jnp.float32), NamedSharding(mesh, P("model")))}
    for name, make in families:
      found, ms, layout = measure(make(), params, mesh)
      print(f"| {name} | {kind} | {fmt(found)} | w {layout['w']} | {ms:.2f} |", flush=True)
    if kind == "Auto":
      import optax  # the sharded iteration: Optax's Newton-Schulz has no gather
      w = {"w": params["w"]}
      found, ms, layout = measure(optax.contrib.scale_by_muon(weight_dimension_numbers={"w": optax.contrib.MuonDimensionNumbers(0, 1)}), w, mesh, with_params=False)
      print(f"| muon (sharded iteration, Optax) | {kind} | {fmt(found)} | w {layout['w']} | {ms:.2f} |")
      stacked = {"w": jax.device_put(jnp.asarray(rng.normal(size=(8, 32, 32)), jnp.float32),
                                     NamedSharding(mesh, P(("data", "model"), None, None)))}
      dims = {"w": steadax.contrib.MuonDimensionNumbers(1, 2)}
      found, ms, layout = measure(steadax.contrib.scale_by_muon(weight_dimension_numbers=dims), stacked, mesh)
      print(f"| muon (layer-parallel: 8 stacked 32x32) | {kind} | {fmt(found)} | w {layout['w']} | {ms:.2f} |")
  sys.stdout.flush()


if __name__ == "__main__":
  main()
