"""L-BFGS time to tolerance on the 50-dimensional Rosenbrock function.

steadax and Optax each run the whole solve as one jitted ``lax.while_loop`` (zoom line search,
memory 10) until ``max |grad| <= TOLERANCE``; SciPy's L-BFGS-B (Fortran, float64, memory 10) gets the
same gradient tolerance, with its relative-decrease test switched off so that it stops on the
gradient too. Times are medians over alternating rounds, compilation excluded (reported apart).
"""

from __future__ import annotations

import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import scipy.optimize

import steadax

from .. import harness

DIM = 50
TOLERANCE = 1e-4  # on max |grad|, reachable in float32
MAX_ITERATIONS = 2000


def rosenbrock(x):
  return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def start() -> np.ndarray:
  return np.tile(np.array([-1.2, 1.0], np.float32), DIM // 2)


def jitted_solver(lib):
  """The jitted loop; returns ``solve(x0) -> (x, iterations, value, max |grad|)``."""
  opt = lib.lbfgs()
  value_and_grad = lib.value_and_grad_from_state(rosenbrock)

  def body(carry):
    x, state, iteration, _ = carry
    value, grad = value_and_grad(x, state=state)
    updates, state = opt.update(grad, state, x, value=value, grad=grad, value_fn=rosenbrock)
    return lib.apply_updates(x, updates), state, iteration + 1, grad

  def cond(carry):
    _, _, iteration, grad = carry
    return (iteration < MAX_ITERATIONS) & (jnp.max(jnp.abs(grad)) > TOLERANCE)

  @jax.jit
  def solve(x0):
    carry = (x0, opt.init(x0), jnp.int32(0), jnp.full_like(x0, jnp.inf))
    x, _, iterations, _ = jax.lax.while_loop(cond, body, carry)
    return x, iterations, rosenbrock(x), jnp.max(jnp.abs(jax.grad(rosenbrock)(x)))

  return solve


def scipy_solve(x0: np.ndarray):
  result = scipy.optimize.minimize(
      scipy.optimize.rosen, x0.astype(np.float64), jac=scipy.optimize.rosen_der,
      method="L-BFGS-B",
      options={"gtol": TOLERANCE, "ftol": 0.0, "maxcor": 10, "maxiter": MAX_ITERATIONS})
  return result.x, result.nit, result.fun, np.max(np.abs(result.jac))


def run(sizes: harness.Sizes, progress: harness.Progress) -> dict:
  progress.start("lbfgs", 2 + sizes.lbfgs_rounds)
  x0 = jnp.asarray(start())
  solvers, compile_s = {}, {}
  for label, lib in (("optax", optax), ("steadax", steadax)):
    solve = jitted_solver(lib)
    t0 = time.perf_counter()
    jax.block_until_ready(solve(x0))
    compile_s[label] = time.perf_counter() - t0
    solvers[label] = lambda solve=solve: jax.block_until_ready(solve(x0))
    progress.tick(f"compile {label}")
  solvers["scipy L-BFGS-B"] = lambda: scipy_solve(start())
  solvers["scipy L-BFGS-B"]()  # warm-up
  labels = list(solvers)
  times = {label: [] for label in labels}
  outcome = {}
  for r in range(sizes.lbfgs_rounds):
    for label in (labels if r % 2 == 0 else labels[::-1]):
      t0 = time.perf_counter()
      outcome[label] = solvers[label]()
      times[label].append(time.perf_counter() - t0)
    progress.tick(f"round {r + 1}/{sizes.lbfgs_rounds}")
  rows = []
  for label in labels:
    _, iterations, value, grad_max = outcome[label]
    rows.append({"solver": label, "median_s": statistics.median(times[label]),
                 "rounds_s": times[label], "compile_s": compile_s.get(label),
                 "iterations": int(iterations), "value": float(value),
                 "grad_max": float(grad_max), "converged": bool(grad_max <= TOLERANCE)})
  by_label = {row["solver"]: row["median_s"] for row in rows}
  return {"kind": "lbfgs", "dim": DIM, "tolerance": TOLERANCE, "rows": rows, "ratios": {
      "steadax/optax": by_label["steadax"] / by_label["optax"],
      "steadax/scipy": by_label["steadax"] / by_label["scipy L-BFGS-B"]}}
