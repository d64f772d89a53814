"""A learning-rate sweep as one program: 8 MLPs trained at once with ``steadax.sweep`` and ``jax.vmap``.

Run: ``make example NAME=sweep`` (about 10-30 s on a 2-core CPU; make creates ``.venv``; then
``.venv/bin/python examples/sweep.py`` works too).

A steadax transformation is a pytree whose hyperparameters are leaves, so 8 configurations of
``adamw`` stack into one transformation with a learning rate of shape (8,), and ``jax.vmap`` trains
the 8 models in one compiled program. The script compares it with two sequential ways of running
the same 8 trainings:

* a new jitted step per learning rate, closing over ``adamw(lr)`` (what Optax code does: 8
  compilations);
* one jitted step taking the optimizer as an argument (steadax: 1 compilation, 8 runs in turn).

All three give the same final losses (to float32 rounding); the table shows them.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

import steadax

LEARNING_RATES = [1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 1.0]
STEPS = 1000
EXAMPLES, FEATURES, HIDDEN, CLASSES = 512, 16, 64, 4


def make_data():
  """A synthetic classification problem (labels from a random teacher MLP, plus noise): a training
  set and a held-out set of EXAMPLES each."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=(2 * EXAMPLES, FEATURES)).astype(np.float32)
  teacher = np.tanh(x @ rng.normal(size=(FEATURES, 32))) @ rng.normal(size=(32, CLASSES))
  y = np.argmax(teacher + 1.0 * rng.normal(size=teacher.shape), axis=1).astype(np.int32)
  x, y = jnp.asarray(x), jnp.asarray(y)
  return (x[:EXAMPLES], y[:EXAMPLES]), (x[EXAMPLES:], y[EXAMPLES:])


def init_params(key):
  k1, k2 = jax.random.split(key)
  return {"w1": jax.random.normal(k1, (FEATURES, HIDDEN)) / np.sqrt(FEATURES),
          "b1": jnp.zeros(HIDDEN),
          "w2": jax.random.normal(k2, (HIDDEN, CLASSES)) / np.sqrt(HIDDEN),
          "b2": jnp.zeros(CLASSES)}


def loss_fn(params, x, y):
  logits = jnp.tanh(x @ params["w1"] + params["b1"]) @ params["w2"] + params["b2"]
  return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))


def train_step(tx, params, state, x, y):
  loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
  updates, state = tx.update(grads, state, params)
  return steadax.apply_updates(params, updates), state, loss


def run_sweep(params, x, y):
  """All learning rates in one program: vmap over the sweep, the params and the state."""
  n = len(LEARNING_RATES)
  opt = steadax.sweep(steadax.adamw, learning_rate=jnp.array(LEARNING_RATES), weight_decay=1e-4)
  stacked = jax.tree_util.tree_map(lambda p: jnp.broadcast_to(p, (n, *p.shape)), params)
  state = jax.jit(jax.vmap(lambda tx, p: tx.init(p)))(opt, stacked)
  # in_axes: 0 for the sweep, the params and the state; None for the batch all runs share.
  step = jax.jit(jax.vmap(train_step, in_axes=(0, 0, 0, None, None)))
  for _ in range(STEPS):
    stacked, state, losses = step(opt, stacked, state, x, y)
  return stacked, step._cache_size(), (opt, state, step)


def run_closures(params, x, y):
  """One learning rate after another, a new jitted step (so a new compilation) for each."""
  finals, compilations = [], 0
  for lr in LEARNING_RATES:
    tx = steadax.adamw(lr, weight_decay=1e-4)
    step = jax.jit(lambda p, s, x, y, tx=tx: train_step(tx, p, s, x, y))
    p, state = params, tx.init(params)
    for _ in range(STEPS):
      p, state, _ = step(p, state, x, y)
    finals.append(p)
    compilations += step._cache_size()
  return stack(finals), compilations


def run_sequential(params, x, y):
  """One learning rate after another through one jitted step (the optimizer is an argument)."""
  step = jax.jit(train_step)
  finals = []
  for lr in LEARNING_RATES:
    tx = steadax.adamw(lr, weight_decay=1e-4)
    p, state = params, tx.init(params)
    for _ in range(STEPS):
      p, state, _ = step(tx, p, state, x, y)
    finals.append(p)
  return stack(finals), step._cache_size()


def stack(trees):
  return jax.tree_util.tree_map(lambda *leaves: jnp.stack(leaves), *trees)


def timed(fn, *args):
  t0 = time.perf_counter()
  out = fn(*args)
  jax.block_until_ready(out[0])
  return out, time.perf_counter() - t0


def main():
  (x, y), (x_test, y_test) = make_data()
  params = init_params(jax.random.key(0))
  jax.block_until_ready(jax.jit(loss_fn)(params, x, y))  # the process's first compilation is slower
  (sweep_params, sweep_programs, (opt, state, step)), sweep_s = timed(run_sweep, params, x, y)
  (closure_params, closure_programs), closure_s = timed(run_closures, params, x, y)
  (seq_params, seq_programs), seq_s = timed(run_sequential, params, x, y)

  losses = jax.jit(jax.vmap(loss_fn, in_axes=(0, None, None)))
  train, test = losses(sweep_params, x, y), losses(sweep_params, x_test, y_test)
  print(f"{len(LEARNING_RATES)} learning rates x {STEPS} steps of AdamW on a {FEATURES}-{HIDDEN}-"
        f"{CLASSES} MLP ({EXAMPLES} training and {EXAMPLES} held-out examples)\n")
  def difference(other):  # per configuration: the largest parameter difference from `other`
    return np.max(np.stack([jnp.max(jnp.abs(a - b).reshape(len(LEARNING_RATES), -1), axis=1)
                            for a, b in zip(jax.tree_util.tree_leaves(sweep_params),
                                            jax.tree_util.tree_leaves(other))]), axis=0)

  print(f"{'learning rate':>14} {'train loss':>11} {'held-out loss':>14} {'|params - sequential|':>22}")
  for lr, a, b, d in zip(LEARNING_RATES, train, test, difference(seq_params)):
    print(f"{lr:>14.0e} {a:>11.4f} {b:>14.4f} {d:>22.1e}")
  best = int(np.argmin(test))
  print(f"\nbest held-out loss: learning rate {LEARNING_RATES[best]:.0e}")
  print("The sweep's and the sequential runs' parameters differ by float32 rounding (batched and "
        "unbatched\nmatrix products round differently), which a too-large learning rate amplifies. "
        f"One jit per lr: {np.max(difference(closure_params)):.1e} at most.\n")
  print(f"{'':34} {'wall time':>10} {'compiled programs':>18}")
  print(f"{'vmapped sweep (one program)':34} {sweep_s:>9.2f}s {sweep_programs:>18}")
  print(f"{'sequential, one jit per lr':34} {closure_s:>9.2f}s {closure_programs:>18}")
  print(f"{'sequential, optimizer as argument':34} {seq_s:>9.2f}s {seq_programs:>18}")

  # Slice i of the sweep is an ordinary transformation and state: keep training the best one alone.
  pick = lambda tree: jax.tree_util.tree_map(lambda leaf: leaf[best], tree)  # noqa: E731
  tx, params, state = pick(opt), pick(sweep_params), pick(state)
  for _ in range(10):
    params, state, loss = jax.jit(train_step)(tx, params, state, x, y)
  print(f"\nthe best configuration alone, 10 more steps: train loss {float(loss):.4f}")


if __name__ == "__main__":
  main()
