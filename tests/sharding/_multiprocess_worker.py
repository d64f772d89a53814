"""One process of the two-process training run of test_multiprocess.py (run as a script).

``python _multiprocess_worker.py PROCESS_ID PORT``: joins the run coordinated on 127.0.0.1:PORT
(``jax.distributed.initialize``, CPU collectives over gloo), two CPU devices per process, four in
all, on a 2x2 mesh ``("data", "fsdp")``: the batch is split over both axes (data parallel) and every
parameter over ``"fsdp"`` (FSDP: each device holds half of each weight; the halves of a weight live
on different processes' devices, so the gathers and all-reduces cross processes). The optimizer is
steadax's muon (Newton-Schulz on the matrices, AdamW on the biases) under MultiSteps (two
micro-batches per update). Process 0 also runs the same steps on one device, unsharded, and prints
``RESULT {json}`` with the largest difference.
"""

from __future__ import annotations

import json
import os
import sys

import jax

PROCESS_ID, PORT = int(sys.argv[1]), int(sys.argv[2])
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{PORT}", num_processes=2, process_id=PROCESS_ID,
                           initialization_timeout=40, heartbeat_timeout_seconds=20)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

import steadax  # noqa: E402

STEPS, BATCH = 6, 16
SPECS = {"w1": P("fsdp", None), "b1": P("fsdp"), "w2": P("fsdp", None), "b2": P("fsdp")}


def initial_params() -> dict:
  rng = np.random.default_rng(0)
  return {"w1": (rng.normal(size=(8, 16)) / np.sqrt(8)).astype(np.float32),
          "b1": np.zeros(16, np.float32),
          "w2": (rng.normal(size=(16, 4)) / 4).astype(np.float32),
          "b2": np.zeros(4, np.float32)}


def batches() -> tuple[np.ndarray, np.ndarray]:
  rng = np.random.default_rng(1)
  x = rng.normal(size=(STEPS, BATCH, 8)).astype(np.float32)
  y = np.tanh(x @ rng.normal(size=(8, 4)).astype(np.float32))
  return x, y


def loss(params, x, y):
  # FSDP: each weight is gathered whole for the forward pass (its gradient comes back
  # reduce-scattered to the weight's layout); the batch stays split.
  if not jax.typeof(params["w1"]).sharding.mesh.empty:
    params = jax.tree.map(lambda w: jax.sharding.reshard(w, P()), params)
  hidden = jnp.tanh(x @ params["w1"] + params["b1"])
  return jnp.mean((hidden @ params["w2"] + params["b2"] - y) ** 2)


optimizer = steadax.MultiSteps(steadax.contrib.muon(0.05, adam_weight_decay=0.01), every_k_schedule=2)


def step(params, state, x, y):
  grads = jax.grad(loss)(params, x, y)
  updates, state = optimizer.update(grads, state, params)
  return steadax.apply_updates(params, updates), state


def train(params, xs, ys, put_batch):
  state = jax.jit(optimizer.init)(params)
  jitted = jax.jit(step, donate_argnums=(0, 1))
  for i in range(STEPS):
    params, state = jitted(params, state, *put_batch(xs[i], ys[i]))
  return params, state


def main() -> None:
  assert jax.process_count() == 2 and jax.device_count() == 4 and jax.local_device_count() == 2
  mesh = jax.make_mesh((2, 2), ("data", "fsdp"))
  host_params, (xs, ys) = initial_params(), batches()
  batch_sharding = NamedSharding(mesh, P(("data", "fsdp")))

  def global_array(value, sharding):
    # Every process holds the whole numpy value and hands over the blocks of its own devices.
    return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])

  with jax.set_mesh(mesh):
    params = {k: global_array(v, NamedSharding(mesh, SPECS[k])) for k, v in host_params.items()}
    put = lambda x, y: (global_array(x, batch_sharding), global_array(y, batch_sharding))  # noqa: E731
    params, state = train(params, xs, ys, put)
    layouts = {k: str(v.sharding.spec) for k, v in params.items()}
    mu = state.inner_opt_state.inner_states["muon"].inner_state[0].mu["w1"]
    mu_layout = str(mu.sharding.spec)
    local = {k: v.addressable_shards[0].data.shape for k, v in params.items()}
    gathered = multihost_utils.process_allgather(params, tiled=True)
  if PROCESS_ID == 0:
    # The reference: the same steps on one device, nothing sharded.
    device = jax.local_devices()[0]
    single = {k: jax.device_put(v, device) for k, v in host_params.items()}
    reference, _ = train(single, xs, ys, lambda x, y: (jax.device_put(x, device), jax.device_put(y, device)))
    diff = max(float(np.max(np.abs(np.asarray(gathered[k]) - np.asarray(reference[k])))) for k in SPECS)
    moved = max(float(np.max(np.abs(np.asarray(reference[k]) - host_params[k]))) for k in SPECS)
    print("RESULT " + json.dumps({"max_diff": diff, "moved": moved, "layouts": layouts, "mu_layout": mu_layout,
                                  "local_shapes": {k: list(v) for k, v in local.items()},
                                  "pid": os.getpid()}), flush=True)
  jax.distributed.shutdown()


if __name__ == "__main__":
  main()
