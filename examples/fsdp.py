"""FSDP training of a small transformer with steadax on a virtual device mesh (runs on a laptop CPU).

    make example NAME=fsdp                     # 8 virtual CPU devices, 40 micro-steps
    make example NAME=fsdp ARGS="--steps 8"    # quicker
    .venv/bin/python examples/fsdp.py --steps 8  # the same, once make has created .venv

Layout (docs/sharding.md): a 2x4 mesh ``("data", "fsdp")``. The batch is split over both axes (8-way
data parallelism); every parameter is split over ``"fsdp"`` along its first axis (fully sharded data
parallelism: a device stores a quarter of each weight, of its gradient and of its optimizer
state). The forward pass gathers each weight when it uses it; its gradient comes back
reduce-scattered into the weight's layout. The optimizer is ``steadax.contrib.muon``: Newton-Schulz
orthogonalized momentum for the attention and MLP matrices (each gathered once per step, the
result put back in the weight's layout), AdamW for embeddings, the output head, norms and biases,
under ``steadax.MultiSteps`` (two micro-batches accumulated per update). The optimizer state is
created by a jitted ``init`` and has the parameters' layout, so nothing is replicated.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=40, help="micro-steps (two per optimizer update)")
parser.add_argument("--devices", type=int, default=8, help="virtual CPU devices (a multiple of 4)")
args = parser.parse_args()
# The device count is fixed when jax starts: set it before the import.
os.environ.setdefault("XLA_FLAGS", f"--xla_force_host_platform_device_count={args.devices}")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

import steadax  # noqa: E402

VOCAB, WIDTH, HEADS, LAYERS, SEQ, BATCH = 32, 32, 4, 2, 16, 16


def init_params(key) -> dict:
  keys = iter(jax.random.split(key, 4 + 6 * LAYERS))
  dense = lambda shape: jax.random.normal(next(keys), shape) / np.sqrt(shape[0])  # noqa: E731
  params = {"embed": jax.random.normal(next(keys), (VOCAB, WIDTH)) * 0.5,
            "position": jax.random.normal(next(keys), (SEQ, WIDTH)) * 0.1,
            "head": dense((WIDTH, VOCAB)), "final_norm": jnp.ones(WIDTH)}
  for i in range(LAYERS):
    params[f"block{i}"] = {"norm1": jnp.ones(WIDTH), "norm2": jnp.ones(WIDTH),
                           "query": dense((WIDTH, WIDTH)), "key": dense((WIDTH, WIDTH)),
                           "value": dense((WIDTH, WIDTH)), "out": dense((WIDTH, WIDTH)),
                           "up": dense((WIDTH, 4 * WIDTH)), "down": dense((4 * WIDTH, WIDTH)),
                           "up_bias": jnp.zeros(4 * WIDTH)}
  return params


def norm(x, scale):
  return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * scale


def attention(p, x):
  b, t, d = x.shape
  split = lambda y: y.reshape(b, t, HEADS, d // HEADS)  # noqa: E731
  q, k, v = split(x @ p["query"]), split(x @ p["key"]), split(x @ p["value"])
  logits = jnp.einsum("bthd,bshd->bhts", q, k) / np.sqrt(d // HEADS)
  logits = jnp.where(jnp.tril(jnp.ones((t, t), bool)), logits, -1e9)
  mixed = jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(logits, axis=-1), v)
  return mixed.reshape(b, t, d) @ p["out"]


def loss_fn(params, tokens):
  # FSDP: each weight is gathered whole where it is used (its gradient is reduce-scattered back).
  params = jax.tree.map(lambda w: jax.sharding.reshard(w, P()), params)
  # The embedding lookup as a one-hot product: the batch stays split, the table is whole.
  x = jax.nn.one_hot(tokens[:, :-1], VOCAB) @ params["embed"] + params["position"][: SEQ - 1]
  for i in range(LAYERS):
    p = params[f"block{i}"]
    x = x + attention(p, norm(x, p["norm1"]))
    x = x + jax.nn.gelu(norm(x, p["norm2"]) @ p["up"] + p["up_bias"]) @ p["down"]
  logits = norm(x, params["final_norm"]) @ params["head"]
  targets = jax.nn.one_hot(tokens[:, 1:], VOCAB)
  return -jnp.mean(jnp.sum(targets * jax.nn.log_softmax(logits), axis=-1))


def muon_matrices(params):
  """Muon for the square and MLP matrices of the blocks; AdamW for everything else."""
  dims = steadax.contrib.MuonDimensionNumbers(0, 1)
  return jax.tree_util.tree_map_with_path(
      lambda path, x: dims if x.ndim == 2 and str(path[0].key).startswith("block") else None, params)


def batch(step: int) -> np.ndarray:
  """Sequences of a fixed random permutation cycle from random starts: learnable next tokens."""
  rng = np.random.default_rng(step)
  cycle = np.random.default_rng(0).permutation(VOCAB)
  starts = rng.integers(0, VOCAB, size=(BATCH, 1))
  return cycle[(starts + np.arange(SEQ)) % VOCAB]


def progress(done: int, total: int, loss: float, width: int = 30) -> None:
  filled = int(width * done / total)
  sys.stdout.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} loss {loss:.3f}")
  sys.stdout.flush()


def main() -> None:
  devices = jax.device_count()
  mesh = jax.make_mesh((2, devices // 2), ("data", "fsdp"))  # explicit axes: layouts are types
  optimizer = steadax.MultiSteps(
      steadax.contrib.muon(steadax.warmup_cosine_decay_schedule(0.0, 0.02, 5, max(args.steps // 2, 6)),
                           adam_learning_rate=3e-3, muon_weight_dimension_numbers=muon_matrices,
                           weight_decay=0.01, adam_weight_decay=0.01),
      every_k_schedule=2)

  def shard(x):
    # Split the first axis over "fsdp" when it divides evenly (everything here but scalars).
    return P("fsdp") if x.ndim and x.shape[0] % mesh.shape["fsdp"] == 0 else P()

  @jax.jit
  def train_step(params, state, tokens):
    loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
    updates, state = optimizer.update(grads, state, params)
    return steadax.apply_updates(params, updates), state, loss

  with jax.set_mesh(mesh):
    host = init_params(jax.random.key(0))
    params = jax.tree.map(lambda x: jax.device_put(x, NamedSharding(mesh, shard(x))), host)
    state = jax.jit(optimizer.init)(params)
    mu = state.inner_opt_state.inner_states["muon"].inner_state[0].mu["block0"]["up"]
    print(f"{devices} devices, mesh {dict(mesh.shape)}; block0.up {params['block0']['up'].shape} is stored "
          f"{params['block0']['up'].sharding.spec}, its Muon momentum {mu.sharding.spec}, one device "
          f"holds {mu.addressable_shards[0].data.shape}")
    tokens_sharding = NamedSharding(mesh, P(("data", "fsdp")))
    rows, start = [], time.perf_counter()
    for step in range(args.steps):
      tokens = jax.device_put(batch(step), tokens_sharding)
      t0 = time.perf_counter()
      params, state, loss = train_step(params, state, tokens)
      loss = float(loss)
      rows.append((step, loss, time.perf_counter() - t0))
      progress(step + 1, args.steps, loss)
    total = time.perf_counter() - start
  print()
  print("| micro-step | loss | step time (ms) |")
  print("|---:|---:|---:|")
  shown = sorted({0, 1, *range(0, args.steps, max(args.steps // 8, 1)), args.steps - 1})
  for step, loss, seconds in (rows[i] for i in shown):
    print(f"| {step} | {loss:.4f} | {seconds * 1e3:.1f}{' (compile)' if step == 0 else ''} |")
  steady = [s for _, _, s in rows[1:]] or [rows[0][2]]
  print(f"first loss {rows[0][1]:.4f}, last loss {rows[-1][1]:.4f}; median step {np.median(steady) * 1e3:.1f} ms; "
        f"total {total:.1f} s")


if __name__ == "__main__":
  main()
