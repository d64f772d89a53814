"""Proof on a language model (issue 22 §3): eight optimizers train one small transformer.

A decoder-only transformer (pre-norm, learned positions, GELU MLP, untied output layer; plain JAX,
one dict of arrays) learns to predict the next byte of Python source: the standard library's own
top-level modules (``os.path.dirname(os.__file__)/*.py``, sorted by name), every tenth file held
out for validation, so the data are on every machine that runs the benchmark and the split is by
file. Every optimizer sees the same initial parameters and the same batches (one seeded draw of
window offsets).

Each optimizer runs a small learning-rate sweep as one ``steadax.sweep`` program: the sweep is a
``jax.vmap`` over the stacked transformations, training chunks of ``eval_every`` steps are one
jitted ``lax.scan``, and after every chunk the validation loss of every configuration is measured on
a fixed set of held-out windows. Optax's AdamW, Muon, Lion and Adafactor train the same sweep,
vmapped over the learning rate with ``optax.inject_hyperparams`` (which rounds every
hyperparameter to float32 first, as steadax does: ``docs/migrating.md``, "What you will notice"),
and their validation curves are compared with steadax's.

Reported per optimizer: the validation curve of each learning rate; the best final validation loss;
the steps each needs to reach AdamW's best final validation loss (the first evaluation at or below
it, so counts are multiples of ``eval_every``) and their ratio to AdamW's own; the time of one
training step of one configuration (loss, gradient, update, apply; jitted, median of timed blocks
in alternating rounds, the best learning rate); the optimizer state's bytes for one configuration.
The goal of the issue: some matrix optimizer reaches AdamW's best final loss in at most 0.75x its
steps. Wall time on the chart is steps times that step time.

Two things about running matrix optimizers as a vmapped sweep, found here. The stacked state's
integer leaves (step counters, random keys) are the same in every configuration and are kept
unbatched (``shared_counters``): batched, a refresh every k steps (SOAP, Shampoo) or at random steps
(PSGD-Kron) is a ``lax.cond`` on a batched predicate, which ``vmap`` turns into a select that runs
the refresh at every step. And on XLA's CPU backend (jax 0.10.2) a 256x256 ``jnp.linalg.eigh``
takes most of a second, so SOAP runs with ``max_precond_dim=128`` here and its and Shampoo's step
times on a CPU are dominated by their refreshes.

  python -m benchmarks.run --cases lm [--quick]
  python -m benchmarks.cases.lm --config gpu --json lm.json   # a larger model, for an accelerator
  python -m benchmarks.cases.lm --config quick --scanned       # stacked, scanned layers (lm_scanned.py)
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

import steadax

from .. import harness

VOCAB = 256  # bytes
GOAL_RATIO = 0.75
MATRIX_OPTIMIZERS = ("muon", "soap", "shampoo", "psgd_kron")


@dataclasses.dataclass(frozen=True)
class Config:
  """The model, the data and the training length of one size of the case."""

  name: str
  d_model: int
  layers: int
  heads: int
  context: int
  batch: int           # windows per training step
  steps: int
  eval_every: int      # steps per jitted chunk; a validation point after each
  val_windows: int     # held-out windows of ``context + 1`` bytes, evenly spaced
  timing_rounds: int   # alternating rounds of the single-configuration step timing
  timing_steps: int    # steps per timed block
  optimizers: tuple = ()  # empty: all of OPTIMIZERS


CONFIGS = {
    # The test suite's: it runs, it reports, the Optax curves match (two optimizers, four steps).
    "smoke": Config("smoke", d_model=16, layers=1, heads=2, context=16, batch=4, steps=4,
                    eval_every=2, val_windows=8, timing_rounds=1, timing_steps=2,
                    optimizers=("adamw", "muon")),
    "quick": Config("quick", d_model=32, layers=1, heads=2, context=32, batch=16, steps=60,
                    eval_every=10, val_windows=64, timing_rounds=2, timing_steps=5),
    "full": Config("full", d_model=64, layers=2, heads=4, context=64, batch=32, steps=200,
                   eval_every=20, val_windows=128, timing_rounds=3, timing_steps=10),
    # For an accelerator: ~3.3M parameters, 12.3M training bytes seen.
    "gpu": Config("gpu", d_model=256, layers=4, heads=8, context=128, batch=64, steps=1500,
                  eval_every=50, val_windows=512, timing_rounds=5, timing_steps=20),
}


# XLA's CPU runtime deadlocks on some of this case's vmapped programs (a PSGD-Kron sweep of 3 on the
# quick model: every thread waits on a futex, forever) while its concurrency-optimized scheduler is
# on; off, they run. The flag is read when the backend starts.
CPU_FLAG = "--xla_cpu_enable_concurrency_optimized_scheduler=false"


def set_cpu_flag() -> None:
  """Adds ``CPU_FLAG`` to ``XLA_FLAGS`` (call before JAX's backend starts; later it has no effect)."""
  flags = os.environ.get("XLA_FLAGS", "")
  if CPU_FLAG.split("=")[0] not in flags:
    os.environ["XLA_FLAGS"] = f"{flags} {CPU_FLAG}".strip()


# -- data ----------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Corpus:
  train: np.ndarray  # uint8
  val: np.ndarray
  train_files: int
  val_files: int
  sha256: str        # of train + val, so runs on different Pythons can be told apart


def corpus() -> Corpus:
  """The standard library's top-level modules, sorted; files 0, 10, 20, ... held out."""
  root = os.path.dirname(os.__file__)
  names = sorted(n for n in os.listdir(root) if n.endswith(".py"))
  texts = []
  for name in names:
    with open(os.path.join(root, name), "rb") as f:
      texts.append(f.read())
  val = b"".join(t for i, t in enumerate(texts) if i % 10 == 0)
  train = b"".join(t for i, t in enumerate(texts) if i % 10 != 0)
  return Corpus(np.frombuffer(train, np.uint8), np.frombuffer(val, np.uint8),
                train_files=sum(1 for i in range(len(names)) if i % 10 != 0),
                val_files=sum(1 for i in range(len(names)) if i % 10 == 0),
                sha256=hashlib.sha256(train + val).hexdigest()[:16])


def batch_offsets(config: Config, n_train: int, seed: int = 0) -> np.ndarray:
  """Window starts of every step, ``(steps, batch)`` int32: one draw shared by every optimizer."""
  rng = np.random.default_rng(seed)
  return rng.integers(0, n_train - config.context - 1, (config.steps, config.batch)).astype(np.int32)


def windows(data: jax.Array, offsets: jax.Array, context: int) -> jax.Array:
  """``(len(offsets), context + 1)`` int32 tokens starting at ``offsets``."""
  return data[offsets[:, None] + jnp.arange(context + 1)]


def val_windows(config: Config, val: np.ndarray) -> jax.Array:
  starts = np.linspace(0, len(val) - config.context - 2, config.val_windows).astype(np.int64)
  return jnp.asarray(np.stack([val[s:s + config.context + 1] for s in starts]).astype(np.int32))


# -- the model -----------------------------------------------------------------------------------

def init_params(config: Config, seed: int = 0) -> dict:
  """Float32 parameters: matrices N(0, 1/fan_in) (residual outputs scaled by 1/sqrt(2 layers))."""
  d, hidden = config.d_model, 4 * config.d_model
  keys = iter(jax.random.split(jax.random.key(seed), 4 + 6 * config.layers))

  def matrix(shape, scale=1.0):
    return scale * jax.random.normal(next(keys), shape, jnp.float32) / np.sqrt(shape[0])

  def norm():
    return {"scale": jnp.ones(d, jnp.float32), "bias": jnp.zeros(d, jnp.float32)}

  residual = 1.0 / np.sqrt(2 * config.layers)
  blocks = [{"norm1": norm(), "query": matrix((d, d)), "key": matrix((d, d)),
             "value": matrix((d, d)), "out": matrix((d, d), residual), "norm2": norm(),
             "up": matrix((d, hidden)), "down": matrix((hidden, d), residual)}
            for _ in range(config.layers)]
  return {"embed": 0.1 * jax.random.normal(next(keys), (VOCAB, d), jnp.float32),
          "position": 0.1 * jax.random.normal(next(keys), (config.context, d), jnp.float32),
          "blocks": blocks, "final_norm": norm(), "head": matrix((d, VOCAB))}


def _layer_norm(x, p):
  mean = jnp.mean(x, axis=-1, keepdims=True)
  var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
  return (x - mean) * jax.lax.rsqrt(var + 1e-5) * p["scale"] + p["bias"]


def _block(x: jax.Array, block: dict, heads: int) -> jax.Array:
  """One pre-norm block (causal self-attention, then the GELU MLP) on ``x`` ``(batch, time, d)``."""
  batch, length, d = x.shape
  causal = jnp.tril(jnp.ones((length, length), bool))
  h = _layer_norm(x, block["norm1"])
  q, k, v = (jnp.reshape(h @ block[name], (batch, length, heads, d // heads))
             for name in ("query", "key", "value"))
  scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.float32(np.sqrt(d // heads))
  attention = jax.nn.softmax(jnp.where(causal, scores, np.float32(-1e9)), axis=-1)
  mixed = jnp.reshape(jnp.einsum("bhqk,bkhd->bqhd", attention, v), (batch, length, d))
  x = x + mixed @ block["out"]
  return x + jax.nn.gelu(_layer_norm(x, block["norm2"]) @ block["up"]) @ block["down"]


def forward(params: dict, tokens: jax.Array, heads: int) -> jax.Array:
  """Logits ``(batch, time, VOCAB)`` of the next byte at every position of ``tokens``.

  ``params["blocks"]`` is a list of per-layer dicts (the per-layer layout) or one dict of arrays
  stacked ``(layers, ...)`` (the scanned layout, ``stack_blocks``): the same maths, the blocks run
  by a Python loop or by one ``lax.scan``.
  """
  x = params["embed"][tokens] + params["position"][:tokens.shape[1]]
  if isinstance(params["blocks"], dict):
    x, _ = jax.lax.scan(lambda x, block: (_block(x, block, heads), None), x, params["blocks"])
  else:
    for block in params["blocks"]:
      x = _block(x, block, heads)
  return _layer_norm(x, params["final_norm"]) @ params["head"]


def stack_blocks(params: dict) -> dict:
  """The scanned layout of ``params``: every weight of the blocks one array ``(layers, ...)``."""
  blocks = jax.tree_util.tree_map(lambda *layers: jnp.stack(layers), *params["blocks"])
  return {**params, "blocks": blocks}


def loss_fn(params: dict, tokens: jax.Array, heads: int) -> jax.Array:
  """Mean next-byte cross-entropy (nats) over every position of ``tokens[:, :-1]``."""
  logits = forward(params, tokens[:, :-1], heads)
  log_probs = jax.nn.log_softmax(logits)
  return -jnp.mean(jnp.take_along_axis(log_probs, tokens[:, 1:, None], axis=-1))


def muon_dimensions(lib: Any, params: dict) -> dict:
  """Muon for the blocks' matrices; None (AdamW) for embeddings, the output layer and norms, as
  Muon's authors do. The tree is the parameters' own structure, so both libraries read it alike."""
  def dims(path, leaf):
    in_block = any(getattr(p, "key", None) == "blocks" for p in path)
    return lib.contrib.MuonDimensionNumbers() if in_block and leaf.ndim == 2 else None
  return jax.tree_util.tree_map_with_path(dims, params)


# -- the optimizers ------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Optimizer:
  """One row: its learning rates and a factory ``make(lib, lr, dims)`` for steadax and Optax
  (``dims``: ``muon_dimensions(lib, params)``, built once: a sweep's configurations must share their
  static fields, and a tree of dimension numbers is unhashable, so it is compared by identity)."""

  learning_rates: tuple
  make: Callable[[Any, Any, dict], Any]
  optax_too: bool = False  # Optax's own optimizer of that name runs the same sweep
  note: str = ""


# Muon's AdamW part (embeddings, output layer, norms) runs at a quarter of Muon's learning rate,
# swept with it.
MUON_ADAM_SHARE = 0.25

OPTIMIZERS = {
    "adamw": Optimizer((1e-3, 3e-3, 1e-2, 3e-2),
                       lambda lib, lr, dims: lib.adamw(lr, weight_decay=1e-4), optax_too=True),
    "muon": Optimizer((0.02, 0.04, 0.08), lambda lib, lr, dims: lib.contrib.muon(
        lr, adam_learning_rate=MUON_ADAM_SHARE * lr, muon_weight_dimension_numbers=dims),
        optax_too=True, note="AdamW at lr/4 for embeddings, output layer and norms"),
    # Dimensions above 128 (the vocabulary, the MLP's hidden width) are not rotated: on a CPU an
    # eigendecomposition of 256x256 takes most of a second (see the module docstring).
    "soap": Optimizer((3e-3, 1e-2, 3e-2), lambda lib, lr, dims: lib.soap(lr, max_precond_dim=128),
                      note="max_precond_dim 128"),
    "shampoo": Optimizer((3e-3, 1e-2, 3e-2), lambda lib, lr, dims: lib.shampoo(lr),
                         note="Adam grafting, blocks of 128"),
    "psgd_kron": Optimizer((1e-3, 3e-3, 1e-2), lambda lib, lr, dims: lib.psgd_kron(lr)),
    "mars": Optimizer((3e-3, 1e-2, 3e-2), lambda lib, lr, dims: lib.mars(lr)),
    "lion": Optimizer((3e-4, 1e-3, 3e-3), lambda lib, lr, dims: lib.lion(lr), optax_too=True),
    "adafactor": Optimizer((1e-2, 3e-2, 1e-1), lambda lib, lr, dims: lib.adafactor(lr),
                           optax_too=True),
}


# -- training ------------------------------------------------------------------------------------

def _train_step(make: Callable, lib: Any, heads: int) -> Callable:
  """``step(hyper, params, state, tokens) -> (params, state, loss)`` of one configuration."""
  def step(hyper, params, state, tokens):
    loss, grads = jax.value_and_grad(loss_fn)(params, tokens, heads)
    updates, state = make(hyper).update(grads, state, params)
    return lib.apply_updates(params, updates), state, loss
  return step


def shared_counters(state: Any) -> tuple[Any, Any]:
  """The stacked state with its integer and key leaves unstacked, and the ``vmap`` axes to match.

  Step counters and random keys do not depend on the hyperparameters, so every configuration holds
  the same values. Kept batched, a preconditioner refresh every k steps (SOAP, Shampoo) or at random
  steps (PSGD-Kron) is a ``lax.cond`` on a batched predicate, which ``vmap`` turns into a select
  that runs the refresh at every step; unbatched, it stays a branch. Should one of them depend on a
  hyperparameter after all, ``vmap`` refuses to return it unbatched (``out_axes=None``).
  """
  leaves, structure = jax.tree_util.tree_flatten(state)
  axes = [None if jnp.issubdtype(x.dtype, jnp.integer)
          or jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else 0 for x in leaves]
  shared = [x if axis == 0 else x[0] for x, axis in zip(leaves, axes)]
  return (jax.tree_util.tree_unflatten(structure, shared),
          jax.tree_util.tree_unflatten(structure, axes))


def train_sweep(make: Callable, hyper: Any, n: int, lib: Any, config: Config, data: dict,
                progress: harness.Progress, label: str) -> dict:
  """Trains ``n`` configurations as one vmapped program; ``make(hyper_i)`` is configuration i's
  transformation (``hyper`` has a leading axis n). Returns the curves and the times."""
  params0 = data["params"]
  params = jax.tree_util.tree_map(lambda p: jnp.broadcast_to(p, (n, *p.shape)), params0)
  state = jax.jit(jax.vmap(lambda h, p: make(h).init(p)))(hyper, params)
  state, state_axes = shared_counters(state)
  step = jax.vmap(_train_step(make, lib, config.heads), in_axes=(0, 0, state_axes, None),
                  out_axes=(0, state_axes, 0))

  def chunk(hyper, params, state, train, offsets):
    def body(carry, offs):
      params, state, loss = step(hyper, *carry, windows(train, offs, config.context))
      return (params, state), loss
    (params, state), losses = jax.lax.scan(body, (params, state), offsets)
    return params, state, losses

  evaluate = jax.jit(jax.vmap(lambda p, tokens: loss_fn(p, tokens, config.heads),
                              in_axes=(0, None)))
  offsets = data["offsets"].reshape(-1, config.eval_every, config.batch)
  t0 = time.perf_counter()
  chunk = jax.jit(chunk, donate_argnums=(1, 2)).lower(
      hyper, params, state, data["train"], offsets[0]).compile()
  compile_s = time.perf_counter() - t0
  val = [np.asarray(evaluate(params, data["val"]))]
  train_losses, chunk_s = [], []
  for i, offs in enumerate(offsets):
    t0 = time.perf_counter()
    params, state, losses = jax.block_until_ready(chunk(hyper, params, state, data["train"], offs))
    chunk_s.append(time.perf_counter() - t0)
    train_losses.append(np.asarray(losses))
    val.append(np.asarray(evaluate(params, data["val"])))
    progress.tick(f"lm {label} step {(i + 1) * config.eval_every}")
  return {"val_loss": np.stack(val, axis=1).tolist(),           # (n, evaluations)
          "train_loss": np.concatenate(train_losses).T.tolist(),  # (n, steps)
          "compile_s": compile_s, "sweep_train_s": sum(chunk_s)}


def time_one_configuration(lib: Any, tx: Any, config: Config, data: dict) -> Any:
  """A jitted training step of one configuration (donated), ready to time: ``run(steps) -> s``."""
  step = jax.jit(_train_step(lambda h: h, lib, config.heads), donate_argnums=(1, 2))
  params = jax.tree_util.tree_map(jnp.copy, data["params"])
  state = jax.jit(tx.init)(params)
  tokens = windows(data["train"], jnp.asarray(data["offsets"][0]), config.context)
  params, state, _ = jax.block_until_ready(step(tx, params, state, tokens))

  def run(steps):
    nonlocal params, state
    t0 = time.perf_counter()
    for _ in range(steps):
      params, state, loss = step(tx, params, state, tokens)
    jax.block_until_ready(loss)
    return (time.perf_counter() - t0) / steps
  return run


def state_bytes(state: Any) -> int:
  """Bytes of a state (abstract or concrete), random keys included (8 bytes each, as stored)."""
  return sum(int(np.prod(x.shape)) * x.dtype.itemsize for x in jax.tree_util.tree_leaves(state))


# -- the numbers ---------------------------------------------------------------------------------

def steps_to(curve: list, eval_steps: list, target: float) -> int | None:
  """The first evaluated step whose validation loss is at or below ``target`` (None: never)."""
  for step, value in zip(eval_steps, curve):
    if value <= target:
      return step
  return None


def summarize(rows: dict, eval_steps: list) -> dict:
  """Best final loss and steps to AdamW's best final loss, per optimizer; the goal's verdict.

  For each optimizer the learning rate with the lowest final validation loss is its "best"; the
  steps to the target are the fewest over its learning rates (the best at reaching the target).
  """
  finals = {name: [curve[-1] for curve in row["val_loss"]] for name, row in rows.items()}
  target = min(v for v in finals["adamw"] if math.isfinite(v))
  summary = {"target": target, "eval_steps": eval_steps, "optimizers": {}}
  for name, row in rows.items():
    finite = [(v, i) for i, v in enumerate(finals[name]) if math.isfinite(v)]
    best = min(finite)[1] if finite else 0
    reach = [(s, i) for i, curve in enumerate(row["val_loss"])
             if (s := steps_to(curve, eval_steps, target)) is not None]
    summary["optimizers"][name] = {
        "best_lr": row["learning_rates"][best], "best_final_val_loss": finals[name][best],
        "steps_to_target": min(reach)[0] if reach else None,
        "steps_to_target_lr": row["learning_rates"][min(reach)[1]] if reach else None}
  adamw_steps = summary["optimizers"]["adamw"]["steps_to_target"]
  for entry in summary["optimizers"].values():
    s = entry["steps_to_target"]
    entry["steps_ratio"] = None if s is None else s / adamw_steps
    entry["meets_goal"] = s is not None and s / adamw_steps <= GOAL_RATIO
  summary["goal_met_by"] = [n for n in MATRIX_OPTIMIZERS if n in rows
                            and summary["optimizers"][n]["meets_goal"]]
  return summary


def compare(steadax_row: dict, optax_row: dict) -> dict:
  """How far apart the two libraries' curves of the same sweep are, per learning rate.

  ``val_abs_diff``: the largest absolute difference of the validation losses; ``apart_from``: the
  first step whose training losses differ by more than 1e-4 (relative), None if none does. Runs
  start from the same numbers up to float32 rounding; a learning rate at the edge of stability
  amplifies the last bits within a few dozen steps (docs/migrating.md, "What you will notice").
  """
  a, b = np.asarray(steadax_row["val_loss"]), np.asarray(optax_row["val_loss"])
  ta, tb = np.asarray(steadax_row["train_loss"]), np.asarray(optax_row["train_loss"])
  rel = np.abs(ta - tb) / np.abs(tb)
  return {"val_abs_diff": np.max(np.abs(a - b), axis=1).tolist(),
          "train_rel_diff": np.max(rel, axis=1).tolist(),
          "apart_from": [int(np.argmax(r > 1e-4)) + 1 if np.any(r > 1e-4) else None for r in rel],
          "val_max_abs_diff": float(np.max(np.abs(a - b))),
          "val_max_rel_diff": float(np.max(np.abs(a - b) / np.abs(b))),
          "train_max_rel_diff": float(np.max(rel))}


def measure(config: Config, progress: harness.Progress | None = None,
            on_optimizer: Callable[[dict, dict], None] | None = None) -> dict:
  """The case's result; ``on_optimizer(rows, optax_rows)`` hears the curves after each optimizer's
  sweep (``benchmarks/device.py`` keeps them should a time cap stop the run)."""
  progress = progress or harness.Progress(enabled=False)
  names = list(config.optimizers or OPTIMIZERS)
  twins = [n for n in names if OPTIMIZERS[n].optax_too]
  chunks = config.steps // config.eval_every
  progress.start("lm", (len(names) + len(twins)) * chunks + config.timing_rounds)
  text = corpus()
  params = init_params(config)
  data = {"train": jnp.asarray(text.train.astype(np.int32)), "val": val_windows(config, text.val),
          "offsets": batch_offsets(config, len(text.train)), "params": params}
  eval_steps = list(range(0, config.steps + 1, config.eval_every))
  dims = {lib: muon_dimensions(lib, params) for lib in (steadax, optax)}
  rows, optax_rows = {}, {}
  for name in names:
    spec = OPTIMIZERS[name]
    lrs = spec.learning_rates
    progress.doing(f"lm {name}: compiling")
    opt = steadax.sweep(lambda lr, spec=spec: spec.make(steadax, lr, dims[steadax]),
                        lr=jnp.asarray(lrs, jnp.float32))
    trained = train_sweep(lambda h: h, opt, len(lrs), steadax, config, data, progress, name)
    rows[name] = {"learning_rates": list(lrs), "note": spec.note, **trained}
    state = jax.eval_shape(spec.make(steadax, lrs[0], dims[steadax]).init, params)
    rows[name]["state_bytes"] = state_bytes(state)
    if name in twins:
      progress.doing(f"lm optax {name}: compiling")
      factory = optax.inject_hyperparams(lambda learning_rate, spec=spec: spec.make(
          optax, learning_rate, dims[optax]))
      optax_rows[name] = {"learning_rates": list(lrs), **train_sweep(
          lambda lr: factory(learning_rate=lr), jnp.asarray(lrs, jnp.float32), len(lrs), optax,
          config, data, progress, f"optax {name}")}
      optax_rows[name].update(compare(rows[name], optax_rows[name]))
      optax_state = jax.eval_shape(spec.make(optax, lrs[0], dims[optax]).init, params)
      optax_rows[name]["state_bytes"] = state_bytes(optax_state)
    if on_optimizer is not None:
      on_optimizer(rows, optax_rows)
  summary = summarize(rows, eval_steps)

  # One configuration's step (the best learning rate), timed in alternating rounds.
  runners = {}
  for name in names:
    progress.doing(f"lm {name}: compiling the single step")
    lr = summary["optimizers"][name]["best_lr"]
    runners[name] = time_one_configuration(steadax, OPTIMIZERS[name].make(steadax, lr, dims[steadax]),
                                           config, data)
    runners[name](config.timing_steps)  # warm-up
  times: dict = {name: [] for name in names}
  for r in range(config.timing_rounds):
    for name in (names if r % 2 == 0 else names[::-1]):
      times[name].append(runners[name](config.timing_steps))
    progress.tick(f"lm timing round {r + 1}/{config.timing_rounds}")
  for name in names:
    rows[name]["step_s"] = statistics.median(times[name])
    rows[name]["step_rounds_s"] = times[name]

  n_params = sum(int(np.prod(p.shape)) for p in jax.tree_util.tree_leaves(params))
  return {"kind": "lm", "config": dataclasses.asdict(config), "parameters": n_params,
          "data": {"train_bytes": len(text.train), "val_bytes": len(text.val),
                   "train_files": text.train_files, "val_files": text.val_files,
                   "sha256": text.sha256, "python": sys.version.split()[0]},
          "rows": rows, "optax": optax_rows, "summary": summary}


def run(sizes: harness.Sizes, progress: harness.Progress) -> dict:
  # Optax's code is not written for strict promotion, nor this model for rank promotion errors (a
  # norm's scale broadcasts against the activations); the case runs under JAX's defaults.
  previous = jax.config.jax_numpy_dtype_promotion, jax.config.jax_numpy_rank_promotion
  jax.config.update("jax_numpy_dtype_promotion", "standard")
  jax.config.update("jax_numpy_rank_promotion", "allow")
  try:
    return measure(CONFIGS[sizes.lm_config], progress)
  finally:
    jax.config.update("jax_numpy_dtype_promotion", previous[0])
    jax.config.update("jax_numpy_rank_promotion", previous[1])


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(prog="python -m benchmarks.cases.lm", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--config", default="full", choices=list(CONFIGS))
  parser.add_argument("--optimizers", default=None, help="comma-separated, adamw first")
  parser.add_argument("--steps", type=int, default=None, help="override the config's steps")
  parser.add_argument("--json", default=None, help="write the result here")
  parser.add_argument("--chart", default=None, help="write the chart here (PNG)")
  parser.add_argument("--scanned", action="store_true",
                      help="the scanned configuration: the layers stacked and scanned against the "
                           "per-layer model (cases/lm_scanned.py; at least 4 layers)")
  args = parser.parse_args(argv)
  set_cpu_flag()
  config = CONFIGS[args.config]
  if args.optimizers:
    config = dataclasses.replace(config, optimizers=tuple(args.optimizers.split(",")))
  if args.steps:
    config = dataclasses.replace(config, steps=args.steps)
  jax.config.update("jax_numpy_dtype_promotion", "standard")
  if args.scanned:
    from . import lm_scanned
    result = lm_scanned.compare_layouts(lm_scanned.scanned_config(config),
                                        list(config.optimizers) or None, harness.Progress())
    print("\n".join(lm_scanned.table(result)))
    if args.json:
      with open(args.json, "w") as f:
        json.dump(result, f, indent=1)
    return
  result = measure(config, harness.Progress())
  from .. import report
  print("\n".join(report.lm_table(result)))
  if args.json:
    report.write_json(args.json, result)
  if args.chart:
    report.lm_chart(args.chart, result, f"{config.name} config, {jax.default_backend()}")


if __name__ == "__main__":
  main()
