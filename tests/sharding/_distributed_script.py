"""Matrix statistics divided across 8 virtual CPU devices (run as a script by
test_distributed_statistics.py; prints ``RESULT {json}``).

Sixteen 16x16 weights (one shape group) sharded ``P("fsdp", None)`` on an 8-device mesh, with
explicit axes and with automatic ones (set by ``jax.set_mesh``), updated three times by Muon, SOAP,
Shampoo, PSGD-Kron and GaLore (one jitted update per optimizer; GaLore's SVDs at every step).
Reported per mesh kind and optimizer: the bytes of the matrix statistics on the busiest device and
in all, the layouts of the state and the updates, the collectives of the compiled update, and the
largest difference from the same steps on one device. Then the same sixteen weights stacked as
one ``(16, 16, 16)`` leaf sharded along its layer axis, ``P("fsdp", None, None)``, with dimension
numbers naming that axis a batch axis (``stacked``): the layouts of its state and update (the
layer axis keeps its sharding) and its collectives (each device has whole matrices: none needed).
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")

import steadax  # noqa: E402

steadax.set_strict(True)

OPTIMIZERS = {
    "muon": (lambda: steadax.contrib.muon(0.02), ("mu",)),
    "soap": (lambda: steadax.soap(0.02, precondition_frequency=1), ("statistics", "eigenbases")),
    "shampoo": (lambda: steadax.shampoo(0.02, precondition_frequency=1), ("statistics", "preconditioners")),
    "psgd_kron": (lambda: steadax.psgd_kron(0.02, preconditioner_update_probability=1.0), ("preconditioner",)),
    # Rank 8: the projectors (16x8) and the low-rank moments (8x16) have an axis 8 devices divide.
    "galore": (lambda: steadax.contrib.galore(0.02, rank=8, update_proj_gap=1), ("projector", "mu", "nu")),
}


STACKED = steadax.WeightDimensionNumbers(1, 2)
STACKED_OPTIMIZERS = {
    "muon": lambda: steadax.contrib.muon(0.02, muon_weight_dimension_numbers=STACKED),
    "soap": lambda: steadax.soap(0.02, precondition_frequency=1, weight_dimension_numbers=STACKED),
    "shampoo": lambda: steadax.shampoo(0.02, precondition_frequency=1, weight_dimension_numbers=STACKED),
    "psgd_kron": lambda: steadax.psgd_kron(0.02, preconditioner_update_probability=1.0,
                                           weight_dimension_numbers=STACKED),
    "galore": lambda: steadax.contrib.galore(0.02, rank=8, update_proj_gap=1, weight_dimension_numbers=STACKED),
}


def run(make, params, grads):
  tx = make()
  state = jax.jit(tx.init)(params)
  step = jax.jit(lambda g, s, p: tx.update(g, s, p))
  compiled = step.lower(grads[0], state, params).compile()
  for g in grads:
    updates, state = compiled(g, state, params)
  return compiled, updates, state


def main() -> None:
  start = time.process_time()
  rng = np.random.default_rng(0)
  # Sixteen weights: two per device, so the batched LAPACK calls of a device batch two matrices.
  host = {f"w{i}": rng.normal(size=(16, 16)).astype(np.float32) / 4 for i in range(16)}
  host_grads = [{k: rng.normal(size=v.shape).astype(np.float32) for k, v in host.items()} for _ in range(3)]
  one = jax.devices()[0]
  results = {kind: measure(kind, host, host_grads) for kind in ("Explicit", "Auto")}
  references = {name: run(make, jax.device_put(host, one), [jax.device_put(g, one) for g in host_grads])[1:]
                for name, (make, _) in OPTIMIZERS.items()}
  stack = lambda tree: {"w": np.stack([tree[k] for k in sorted(tree, key=lambda k: int(k[1:]))])}  # noqa: E731
  stacked = {kind: measure_stacked(kind, stack(host), [stack(g) for g in host_grads]) for kind in ("Explicit", "Auto")}
  for name, make in STACKED_OPTIMIZERS.items():
    reference = run(make, jax.device_put(stack(host), one), [jax.device_put(stack(g), one) for g in host_grads])[1:]
    for kind in stacked:
      found = stacked[kind][name]
      found["max_diff"] = max_diff(found.pop("values"), reference)
  for kind, found in results.items():
    for name, reference in references.items():
      found[name]["max_diff"] = max_diff(found[name].pop("values"), reference)
  print("RESULT " + json.dumps({"devices": jax.device_count(), "kinds": results, "stacked": stacked,
                                "cpu_s": round(time.process_time() - start, 1)}), flush=True)


def max_diff(values, reference):
  return max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
             for a, b in zip(jax.tree.leaves(values), jax.tree.leaves(reference))
             if not jnp.issubdtype(a.dtype, jax.dtypes.prng_key) and a.size)


def measure_stacked(kind, host, host_grads):
  """The stacked weight sharded along its layer axis: every optimizer's state and update layouts."""
  mesh = jax.make_mesh((8,), ("fsdp",), axis_types=(getattr(AxisType, kind),))
  layers = NamedSharding(mesh, P("fsdp", None, None))
  params = {k: jax.device_put(v, layers) for k, v in host.items()}
  grads = [{k: jax.device_put(v, layers) for k, v in g.items()} for g in host_grads]
  results = {}
  for name, make in STACKED_OPTIMIZERS.items():
    with jax.set_mesh(mesh):
      compiled, updates, state = run(make, params, grads)
    hlo = compiled.as_text()
    results[name] = {
        # Every state leaf with the layer axis (moments, statistics, factors, projectors, the
        # low-rank moments): its layout.
        "state_layouts": sorted({spec_of(x) for x in jax.tree.leaves(state) if x.ndim >= 2 and x.shape[0] == 16}),
        "update_layouts": sorted({spec_of(u) for u in updates.values()}),
        "all_gathers": len(re.findall(r" all-gather(-start)?\(", hlo)),
        "all_to_alls": len(re.findall(r" all-to-all(-start)?\(", hlo)), "values": (updates, state)}
  return results


def measure(kind, host, host_grads):
  """The steps of every optimizer on the 8-device mesh whose axes are of ``kind``."""
  mesh = jax.make_mesh((8,), ("fsdp",), axis_types=(getattr(AxisType, kind),))
  fsdp = NamedSharding(mesh, P("fsdp", None))
  params = {k: jax.device_put(v, fsdp) for k, v in host.items()}
  grads = [{k: jax.device_put(v, fsdp) for k, v in g.items()} for g in host_grads]
  results = {}
  for name, (make, fields) in OPTIMIZERS.items():
    with jax.set_mesh(mesh):
      compiled, updates, state = run(make, params, grads)
    busiest, total, layouts = {}, 0, set()
    for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
      if {getattr(k, "name", None) for k in path} & set(fields) and leaf.ndim >= 2 and leaf.size:
        total += leaf.nbytes
        layouts.add(spec_of(leaf))
        for shard in leaf.addressable_shards:
          busiest[shard.device] = busiest.get(shard.device, 0) + shard.data.nbytes
    if name == "muon":
      # The parameters closed over (concrete) and the gradients batched, as a sweep: the updates still
      # take the parameters' layout (under automatic axes a traced value cannot be tied to a
      # concrete one: it is constrained to the parameter's own sharding instead).
      with jax.set_mesh(mesh):
        state0 = jax.jit(make().init)(params)
        swept = jax.jit(jax.vmap(lambda g: make().update(g, state0, params)[0]))(
            jax.tree.map(lambda x: jnp.stack([x, x]), grads[0]))
    hlo = compiled.as_text()
    results[name] = {
        "busiest_bytes": max(busiest.values()), "total_bytes": total, "statistic_layouts": sorted(layouts),
        "update_layouts": sorted({spec_of(u) for u in updates.values()}),
        "all_gathers": len(re.findall(r" all-gather(-start)?\(", hlo)),
        "all_to_alls": len(re.findall(r" all-to-all(-start)?\(", hlo)), "values": (updates, state)}
    if name == "muon":
      results[name]["swept_layouts"] = sorted({spec_of(u) for u in swept.values()})
  return results


def spec_of(x):
  """The array's PartitionSpec, one entry per axis (a concrete array under automatic axes drops
  trailing Nones)."""
  spec = tuple(x.sharding.spec)
  return str(P(*spec, *(None,) * (x.ndim - len(spec))))


if __name__ == "__main__":
  main()
