"""One process of the two-process sharded checkpoint test (run as a script by test_sharded.py).

``python _sharded_worker.py PROCESS_ID PORT DIRECTORY``: joins a run of two processes on 127.0.0.1:PORT
(``jax.distributed.initialize``, two CPU devices each, four in all). An AdamW state whose moments
follow their parameters' FSDP layout over the four devices (the halves of each weight on different
processes) is saved with ``save_step`` by both processes, then restored into templates of the same
and of another layout. Process 0 prints ``RESULT {json}``: which process wrote which files, and, per
restored leaf, its sharding and whether its values equal the saved ones.
"""

from __future__ import annotations

import json
import os
import sys

import jax

PROCESS_ID, PORT, DIRECTORY = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{PORT}", num_processes=2, process_id=PROCESS_ID,
                           initialization_timeout=40, heartbeat_timeout_seconds=20)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

import steadax  # noqa: E402

MESH = jax.make_mesh((4,), ("fsdp",), axis_types=(jax.sharding.AxisType.Auto,))
SAVED = {"w": P("fsdp", None), "b": P("fsdp"), "keys": P("fsdp")}
OTHER = {"w": P(None, "fsdp"), "b": P(), "keys": P()}  # another layout to restore into


def _sharded_state(tx):
  params = {"w": np.arange(32, dtype=np.float32).reshape(8, 4) / 8, "b": np.linspace(-1, 1, 4, dtype=np.float32)}
  params = {k: jax.device_put(v, NamedSharding(MESH, SAVED[k])) for k, v in params.items()}
  state = tx.init(params)
  grads = jax.tree.map(lambda p: jnp.cos(p), params)
  _, state = jax.jit(tx.update)(grads, state, params)
  return params, state


def _template(state, specs):
  # The Orbax idiom: ShapeDtypeStructs carrying the shardings to restore into; a moment takes its
  # parameter's layout, counters and keys are replicated.
  def one(path, x):
    name = steadax.checkpoint.leaf_path(path).rsplit("/", 1)[-1]
    spec = specs[name] if name in specs and x.ndim else P()
    return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(MESH, spec))
  return jax.tree_util.tree_map_with_path(one, state)


def _report(restored, expected):
  out = {}
  for (path, got), want in zip(jax.tree_util.tree_flatten_with_path(restored)[0], jax.tree.leaves(expected)):
    spec = got.sharding.spec if isinstance(got.sharding, NamedSharding) else None
    record = {"spec": str(spec), "dtype": str(got.dtype), "local_shards": len(got.addressable_shards)}
    if jnp.issubdtype(got.dtype, jax.dtypes.prng_key):
      got, want = jax.random.key_data(got), jax.random.key_data(want)
    record["equal"] = bool(np.array_equal(multihost_utils.process_allgather(got, tiled=True),
                                          multihost_utils.process_allgather(want, tiled=True)))
    out[steadax.checkpoint.leaf_path(path)] = record
  return out


def _soap_state():
  """A SOAP state of two FSDP weights on an explicit mesh over the four devices: its statistics and
  eigenbases divided across the devices (issue 22 §2), each process holding its own rows."""
  mesh = jax.make_mesh((4,), ("fsdp",), axis_types=(jax.sharding.AxisType.Explicit,))
  rows = NamedSharding(mesh, P("fsdp", None))
  params = {f"w{i}": jax.device_put(np.arange(32, dtype=np.float32).reshape(8, 4) / (8 + i), rows) for i in range(2)}
  tx = steadax.soap(1e-2, precondition_frequency=1)
  with jax.set_mesh(mesh):
    state = jax.jit(tx.init)(params)
    grads = jax.tree.map(lambda p: jnp.cos(p), params)
    _, state = jax.jit(tx.update)(grads, state, params)
    _, state = jax.jit(tx.update)(grads, state, params)
  return tx, state


def main():
  tx = steadax.chain(steadax.adamw(1e-2), steadax.add_noise(0.01, 0.55, key=jax.random.key(0)))
  params, state = _sharded_state(tx)
  # Typed PRNG keys split over the processes, and an array with no elements (Orbax stores none).
  keys = jax.jit(lambda: jax.random.split(jax.random.key(1), 4), out_shardings=NamedSharding(MESH, SAVED["keys"]))()
  empty = jax.jit(lambda: jnp.zeros((0, 4)), out_shardings=NamedSharding(MESH, P()))()
  tree = {"params": params, "opt_state": state, "keys": keys, "empty": empty}
  path = steadax.checkpoint.save_step(DIRECTORY, 7, tree, tx=tx)
  multihost_utils.sync_global_devices("saved")
  files = {}
  for root, _, names in os.walk(os.path.join(path, "arrays")):
    for name in names:
      files.setdefault(os.path.relpath(root, path), []).append(name)
  same_layout = steadax.checkpoint.restore_step(DIRECTORY, _template(tree, SAVED), tx=tx)[1]
  other_layout = steadax.checkpoint.restore(path, _template(tree, OTHER))
  # Divided statistics: saved by both processes, restored into their own layout.
  soap_tx, soap_state = _soap_state()
  soap_path = steadax.checkpoint.save_step(os.path.join(DIRECTORY, "soap"), 1, soap_state, tx=soap_tx)
  multihost_utils.sync_global_devices("saved soap")
  soap_template = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), soap_state)
  soap_restored = steadax.checkpoint.restore(soap_path, soap_template)
  result = {"files": sorted(files), "same": _report(same_layout, tree), "other": _report(other_layout, tree),
            "manifest_step": steadax.checkpoint.read_manifest(path)["step"],
            "soap": {k: v for k, v in _report(soap_restored, soap_state).items() if "/statistics/" in k or "/eigenbases/" in k}}
  if PROCESS_ID == 0:
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
  main()
