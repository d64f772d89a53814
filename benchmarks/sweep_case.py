"""Sweep case: 8 learning rates trained one after another with Optax against one vmapped steadax sweep.

Optax users sweep a learning rate by building ``optax.adamw(lr)`` per value and jitting a step that
closes over it: the learning rate is a constant of the program, so every value compiles its own
program, and the 8 runs go one after the other. ``steadax.sweep`` stacks the 8 configurations into
one transformation whose learning rate is a leaf with a leading axis of 8, and ``jax.vmap`` runs the 8
trainings as one compiled program.

Both sides train the same small MLP (full-batch classification of a synthetic data set) for
``STEPS`` steps from the same initial parameters, with AdamW and the same 8 learning rates. Measured
in one process, in alternating rounds (each round builds and compiles everything afresh, as a new
sweep does):

* total wall time of a round: building the optimizers, compiling, and running every step of the 8
  configurations (``jax.block_until_ready`` at the end);
* compilations: XLA backend compilations counted by a ``jax.monitoring`` listener on JAX's
  ``/jax/core/compile/backend_compile_duration`` event during the round (in the first round that
  includes the eager operations of ``init``, compiled once per process), and the size of the jitted
  step functions' caches;
* steady state: the time per step once compiled: for Optax the sum over the 8 programs of their
  time per step (advancing all 8 configurations by one step), for steadax one vmapped step.

``run(rounds)`` returns a flat dict of numbers; ``python benchmarks/sweep_case.py`` prints it.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

import steadax

N = 8
LEARNING_RATES = np.geomspace(1e-4, 3e-2, N).astype(np.float32)
WEIGHT_DECAY = 1e-4
STEPS = 100
EXAMPLES, FEATURES, HIDDEN, CLASSES = 512, 32, 64, 10
STEADY_STEPS = 50  # steps per steady-state timing block
_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


def _data():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(EXAMPLES, FEATURES)).astype(np.float32)
  teacher = rng.normal(size=(FEATURES, CLASSES)).astype(np.float32)
  y = np.argmax(x @ teacher + 0.5 * rng.normal(size=(EXAMPLES, CLASSES)), axis=1).astype(np.int32)
  return jnp.asarray(x), jnp.asarray(y)


def _init_params():
  k1, k2 = jax.random.split(jax.random.key(0))
  return {
      "w1": jax.random.normal(k1, (FEATURES, HIDDEN), jnp.float32) / np.sqrt(FEATURES),
      "b1": jnp.zeros(HIDDEN, jnp.float32),
      "w2": jax.random.normal(k2, (HIDDEN, CLASSES), jnp.float32) / np.sqrt(HIDDEN),
      "b2": jnp.zeros(CLASSES, jnp.float32),
  }


def _loss(params, x, y):
  hidden = jnp.tanh(x @ params["w1"] + params["b1"])
  logits = hidden @ params["w2"] + params["b2"]
  log_probs = jax.nn.log_softmax(logits)
  return -jnp.mean(jnp.take_along_axis(log_probs, y[:, None], axis=1))


@contextlib.contextmanager
def _count_compilations():
  """Counts XLA backend compilations while the block runs (``counter["n"]``)."""
  counter = {"n": 0}

  def listener(event, duration, **kwargs):
    del duration, kwargs
    if event == _COMPILE_EVENT:
      counter["n"] += 1

  jax.monitoring.register_event_duration_secs_listener(listener)
  try:
    yield counter
  finally:
    jax.monitoring.unregister_event_duration_listener(listener)


def _optax_round(params0, x, y):
  """8 sequential Optax runs, one closure (so one program) per learning rate."""
  steps, losses = [], []
  t0 = time.perf_counter()
  with _count_compilations() as compiled:
    for lr in LEARNING_RATES:
      tx = optax.adamw(float(lr), weight_decay=WEIGHT_DECAY)

      @jax.jit
      def step(params, state, x, y, tx=tx):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

      params, state = params0, tx.init(params0)
      for _ in range(STEPS):
        params, state, loss = step(params, state, x, y)
      steps.append((step, params, state))
      losses.append(loss)
    jax.block_until_ready(losses)
  total = time.perf_counter() - t0
  return {"total_s": total, "compilations": compiled["n"],
          "step_cache": sum(s._cache_size() for s, _, _ in steps),
          "losses": np.asarray(losses), "steps": steps}


def _steadax_round(params0, x, y):
  """One vmapped program training the 8 configurations of a steadax sweep."""
  t0 = time.perf_counter()
  with _count_compilations() as compiled:
    opt = steadax.sweep(steadax.adamw, learning_rate=jnp.asarray(LEARNING_RATES),
                        weight_decay=WEIGHT_DECAY)
    params = jax.tree_util.tree_map(lambda p: jnp.broadcast_to(p, (N, *p.shape)), params0)
    state = jax.vmap(lambda tx, p: tx.init(p))(opt, params)

    @jax.jit
    def step(opt, params, state, x, y):
      def one(tx, params, state):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, state = tx.update(grads, state, params)
        return steadax.apply_updates(params, updates), state, loss
      # in_axes=0 for the sweep, the params and the state; the batch is shared (closed over).
      return jax.vmap(one)(opt, params, state)

    for _ in range(STEPS):
      params, state, loss = step(opt, params, state, x, y)
    jax.block_until_ready(loss)
  total = time.perf_counter() - t0
  return {"total_s": total, "compilations": compiled["n"], "step_cache": step._cache_size(),
          "losses": np.asarray(loss), "run": (step, opt, params, state)}


def _time_per_step(fn, carry, rest, repeats=5):
  """Median time per step over ``repeats`` blocks of ``STEADY_STEPS`` consecutive steps."""
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    for _ in range(STEADY_STEPS):
      carry = fn(carry)
    jax.block_until_ready(carry)
    times.append((time.perf_counter() - t0) / STEADY_STEPS)
  del rest
  return statistics.median(times)


def run(rounds: int = 3) -> dict:
  """Measure the sweep case; every value is a number (seconds, counts, ratios).

  Args:
    rounds: alternating rounds of each side (each builds and compiles everything afresh).

  Returns:
    A flat dict: totals (median over rounds), compilations (first round, and per round after it),
    steady-state seconds per step, the ratios, and the largest relative difference between the
    final losses of the two sides (the same training, so it should be small).
  """
  x, y = _data()
  params0 = _init_params()
  jax.block_until_ready((x, y, params0))
  optax_rounds, steadax_rounds = [], []
  for r in range(rounds):
    order = (_optax_round, _steadax_round) if r % 2 == 0 else (_steadax_round, _optax_round)
    for fn in order:
      (optax_rounds if fn is _optax_round else steadax_rounds).append(fn(params0, x, y))
  last_optax, last_steadax = optax_rounds[-1], steadax_rounds[-1]

  optax_per_config = []
  for step, params, state in last_optax["steps"]:
    optax_per_config.append(_time_per_step(
        lambda c, step=step: step(c[0], c[1], x, y)[:2], (params, state), None))
  step, opt, params, state = last_steadax["run"]
  steadax_step = _time_per_step(lambda c: step(opt, c[0], c[1], x, y)[:2], (params, state), None)

  optax_total = statistics.median(r["total_s"] for r in optax_rounds)
  steadax_total = statistics.median(r["total_s"] for r in steadax_rounds)
  optax_step = sum(optax_per_config)
  loss_diff = np.max(np.abs(last_optax["losses"] - last_steadax["losses"]) / np.abs(last_optax["losses"]))
  return {
      "sweep_size": N,
      "steps": STEPS,
      "rounds": rounds,
      "optax_sequential_total_s": optax_total,
      "steadax_sweep_total_s": steadax_total,
      "total_speedup": optax_total / steadax_total,
      "optax_sequential_compilations_first_round": optax_rounds[0]["compilations"],
      "steadax_sweep_compilations_first_round": steadax_rounds[0]["compilations"],
      "optax_sequential_compilations_per_round": (
          optax_rounds[-1]["compilations"] if rounds > 1 else optax_rounds[0]["compilations"]),
      "steadax_sweep_compilations_per_round": (
          steadax_rounds[-1]["compilations"] if rounds > 1 else steadax_rounds[0]["compilations"]),
      "optax_sequential_step_programs": last_optax["step_cache"],
      "steadax_sweep_step_programs": last_steadax["step_cache"],
      "optax_step_s_per_config": optax_step / N,
      "optax_sequential_step_s": optax_step,
      "steadax_sweep_step_s": steadax_step,
      "step_speedup": optax_step / steadax_step,
      "final_loss_max_rel_diff": float(loss_diff),
  }


if __name__ == "__main__":
  print(json.dumps(run(), indent=2))
