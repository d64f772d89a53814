"""steadax demo: a small MLP on scikit-learn's digits with five steadax optimizers.

Run with ``make demo``. Prints a table (optimizer, final loss, test accuracy, ms/step) and writes the
table and the loss curves to ``examples/out/`` (git-ignored: ``demo_table.md``, ``demo_loss.png``;
``--out DIR`` elsewhere). It never rewrites tracked files: README.md shows a committed copy of one
run's table and curves (``docs/assets/demo_loss.png``).
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from tqdm import tqdm

import steadax as optax  # the drop-in promise: Optax code runs unchanged

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "out")


def load_data(seed: int = 0):
  digits = load_digits()
  x = (digits.data / 16.0).astype(np.float32)
  y = digits.target.astype(np.int32)
  return train_test_split(x, y, test_size=0.2, random_state=seed, stratify=y)


def init_mlp(key, sizes=(64, 128, 64, 10)):
  params = []
  for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
    key, sub = jax.random.split(key)
    w = jax.random.normal(sub, (fan_in, fan_out), jnp.float32) * jnp.sqrt(2.0 / fan_in)
    params.append({"w": w, "b": jnp.zeros(fan_out, jnp.float32)})
  return params


def forward(params, x):
  for layer in params[:-1]:
    x = jax.nn.relu(x @ layer["w"] + layer["b"])
  return x @ params[-1]["w"] + params[-1]["b"]


def loss_fn(params, x, y):
  logits = forward(params, x)
  return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, y))


def accuracy(params, x, y):
  return float(jnp.mean(jnp.argmax(forward(params, x), -1) == y))


def optimizers(total_steps: int):
  return {
      "sgd + momentum": optax.sgd(0.05, momentum=0.9),
      "adamw": optax.adamw(1e-3, weight_decay=1e-4),
      "adamw + warmup cosine": optax.adamw(
          optax.warmup_cosine_decay_schedule(0.0, 3e-3, total_steps // 10, total_steps, 1e-5),
          weight_decay=1e-4),
      "lion": optax.lion(3e-4, weight_decay=1e-3),
      "adafactor": optax.adafactor(1e-2),
  }


def train(name, tx, params, data, epochs, batch_size, seed):
  x_train, x_test, y_train, y_test = data
  state = tx.init(params)

  @jax.jit
  def step(params, state, xb, yb):
    loss, grads = jax.value_and_grad(loss_fn)(params, xb, yb)
    updates, state = tx.update(grads, state, params)
    return optax.apply_updates(params, updates), state, loss

  rng = np.random.default_rng(seed)
  n = len(x_train)
  steps_per_epoch = n // batch_size
  losses, times = [], []
  bar = tqdm(range(epochs * steps_per_epoch), desc=f"{name:>22}", ncols=90, leave=True)
  order = rng.permutation(n)
  for i in bar:
    j = i % steps_per_epoch
    if j == 0:
      order = rng.permutation(n)
    idx = order[j * batch_size:(j + 1) * batch_size]
    t0 = time.perf_counter()
    params, state, loss = step(params, state, x_train[idx], y_train[idx])
    loss = float(loss)  # blocks until the step is done
    if i > 0:  # the first call compiles
      times.append(time.perf_counter() - t0)
    losses.append(loss)
    if i % 20 == 0:
      bar.set_postfix(loss=f"{loss:.4f}")
  final_loss = float(loss_fn(params, x_train, y_train))
  return {
      "losses": losses,
      "final_loss": final_loss,
      "test_accuracy": accuracy(params, x_test, y_test),
      "ms_per_step": 1e3 * float(np.median(times)),
  }


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument("--epochs", type=int, default=30)
  parser.add_argument("--batch-size", type=int, default=128)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--no-plot", action="store_true")
  parser.add_argument("--out", default=OUT, help="directory for demo_table.md and demo_loss.png")
  args = parser.parse_args(argv)

  data = load_data(args.seed)
  params = init_mlp(jax.random.PRNGKey(args.seed))
  total = args.epochs * (len(data[0]) // args.batch_size)
  results = {}
  for name, tx in optimizers(total).items():
    results[name] = train(name, tx, params, data, args.epochs, args.batch_size, args.seed)

  header = "| optimizer | final train loss | test accuracy | ms/step |\n|---|---:|---:|---:|"
  rows = [
      f"| {name} | {r['final_loss']:.4f} | {100 * r['test_accuracy']:.1f}% | {r['ms_per_step']:.2f} |"
      for name, r in results.items()
  ]
  table = "\n".join([header, *rows])
  print()
  print(table)
  os.makedirs(args.out, exist_ok=True)
  with open(os.path.join(args.out, "demo_table.md"), "w") as f:
    f.write(table + "\n")

  if not args.no_plot:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, r in results.items():
      curve = np.convolve(r["losses"], np.ones(10) / 10, mode="valid")
      ax.plot(curve, label=name)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (10-step moving average)")
    ax.set_title("steadax optimizers: MLP on scikit-learn digits")
    ax.legend()
    fig.tight_layout()
    path = os.path.join(args.out, "demo_loss.png")
    fig.savefig(path, dpi=120)
    print(f"loss curves written to {os.path.relpath(path)}")

  accuracy_adamw = results["adamw"]["test_accuracy"]
  if accuracy_adamw < 0.95:
    raise SystemExit(f"adamw reached only {100 * accuracy_adamw:.1f}% test accuracy (< 95%)")


if __name__ == "__main__":
  main()
