"""Deterministic solvers: time and objective evaluations to a gradient-norm tolerance.

Problems: Rosenbrock in 2, 50 and 1,000 dimensions, an ill-conditioned quadratic (100-d, condition
number 1e4, rotated), multinomial logistic regression on scikit-learn's digits (650 parameters, L2
penalty 1e-3), and a bounded problem (50-d Rosenbrock on the box [-0.5, 0.8]). Each solver runs until
the Euclidean norm of the (projected) gradient is at most ``TOLERANCE`` (1e-5; 1e-8 under x64):

* ``steadax.minimize`` (default lbfgs, lbfgsb for the bounded problem), one jitted while loop;
* Optax's lbfgs in the jitted while loop its documentation suggests (zoom search, memory 10; no
  bounds, so no bounded row), testing the gradient the search stored at the new iterate (the
  documented loop tests the previous iterate's and takes one step more);
* scipy's L-BFGS-B (float64, memory 10, ``ftol=0`` so it stops on the gradient), calling a jitted
  JAX value and gradient; stopped by a callback at the first iterate whose Euclidean (projected)
  gradient norm is at most the tolerance, as the others (its own test is on the max norm, which
  would stop it up to sqrt(n) times earlier: see ``scipy_solve``);
* Optimistix's BFGS and LBFGS where it installs (its own Cauchy stopping test, ``rtol = atol =
  TOLERANCE``; its evaluations are counted in a separate, untimed run with a counting objective).

Times are medians over alternating rounds, compilation excluded (reported apart). The
steadax/optax time ratio is measured apart (``paired_ratio``): the median of per-round ratios over
up to 60 alternating rounds, each timing a ~5 ms batch of calls of both, with the quartiles beside
it; a one-call sample of a 70 us solve is mostly timer and dispatch jitter. Evaluations:
each objective call with its gradient (all of these solvers evaluate both together). The
steadax/scipy evaluation ratio counts both up to the first iterate whose Euclidean (projected)
gradient norm is at most the tolerance, read from each solver's per-iterate trace (steadax's from a
``minimize`` callback in an untimed run); where scipy stops short of the tolerance (in float32 its
float64 line search ends when the float32 values stop resolving decreases) both are counted to the
smallest norm both reach, shown beside the ratio. Then a
64-start multi-start on 20-d Rosenbrock: one vmapped ``minimize`` against 64 sequential scipy runs.
"""

from __future__ import annotations

import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import scipy.optimize

import steadax

from .. import harness, report

try:  # Optimistix is optional: its columns are left out where it does not install.
  import optimistix
except ImportError:  # pragma: no cover
  optimistix = None

X64 = bool(jax.config.jax_enable_x64)
DTYPE = np.float64 if X64 else np.float32
TOLERANCE = 1e-8 if X64 else 1e-5
MAX_STEPS = 5_000
MULTI_STARTS = 64
MULTI_DIM = 20


def rosenbrock(x):
  return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def _quadratic():
  rng = np.random.default_rng(0)
  q = np.linalg.qr(rng.normal(size=(100, 100)))[0]
  hessian = jnp.asarray(q @ np.diag(np.logspace(0, 4, 100)) @ q.T, DTYPE)

  def quadratic(x):
    # The minimiser is 0, where the gradient is computed to full relative precision (around 1 a
    # float32 gradient of this Hessian has a rounding floor near 1e-3, above any tolerance here).
    return 0.5 * x @ (hessian @ x)

  return quadratic, np.ones(100, DTYPE)


def _digits():
  from sklearn.datasets import load_digits

  data = load_digits()
  features = jnp.asarray(data.data / 16.0, DTYPE)
  labels = jax.nn.one_hot(jnp.asarray(data.target), 10, dtype=DTYPE)

  def logistic(x):
    w, b = x[:640].reshape(64, 10), x[640:]
    logits = features @ w + b
    return jnp.mean(jax.nn.logsumexp(logits, axis=1) - jnp.sum(labels * logits, axis=1)) + 1e-3 * (w.ravel() @ w.ravel())

  return logistic, np.zeros(650, DTYPE)


def problems() -> list[dict]:
  quadratic, q0 = _quadratic()
  logistic, l0 = _digits()
  rosen_start = lambda n: np.tile(np.array([-1.2, 1.0], DTYPE), n // 2)  # noqa: E731
  return [
      {"name": "Rosenbrock 2-d", "fun": rosenbrock, "x0": rosen_start(2)},
      {"name": "Rosenbrock 50-d", "fun": rosenbrock, "x0": rosen_start(50)},
      # In float32 the gradient's rounding error at this minimiser is about 4e-5 (L2 over 1,000
      # coordinates): no solver reaches 1e-5, so the float32 run asks for 1e-4 here.
      {"name": "Rosenbrock 1000-d", "fun": rosenbrock, "x0": rosen_start(1000),
       "tol": TOLERANCE if X64 else 1e-4},
      {"name": "quadratic 100-d, cond 1e4", "fun": quadratic, "x0": q0},
      {"name": "logistic regression, digits", "fun": logistic, "x0": l0},
      {"name": "bounded Rosenbrock 50-d", "fun": rosenbrock, "x0": rosen_start(50),
       "bounds": (np.full(50, -0.5, DTYPE), np.full(50, 0.8, DTYPE))},
  ]


def _projected_norm(x, g, bounds):
  x, g = np.asarray(x, np.float64), np.asarray(g, np.float64)
  if bounds is not None:
    g = x - np.clip(x - g, *[np.asarray(b, np.float64) for b in bounds])
  return float(np.sqrt(np.sum(g * g)))


def steadax_solver(problem):
  fun, bounds = problem["fun"], problem.get("bounds")
  tol = jnp.asarray(problem.get("tol", TOLERANCE), DTYPE)

  # Jitted like Optax's loop (an eager minimize call adds about 0.2 ms of Python and dispatch,
  # which only the 2-d problem would notice).
  @jax.jit
  def solve(x0):
    x, info = steadax.minimize(fun, x0, tol=tol, max_steps=MAX_STEPS, bounds=bounds)
    return x, info.num_fun_evals, info.num_steps

  return solve


def optax_solver(problem):
  fun = problem["fun"]
  tol = problem.get("tol", TOLERANCE)
  opt = optax.lbfgs()
  value_and_grad = optax.value_and_grad_from_state(fun)

  def body(carry):
    x, state, steps, _, evals = carry
    value, grad = value_and_grad(x, state=state)
    updates, state = opt.update(grad, state, x, value=value, grad=grad, value_fn=fun)
    searched = optax.tree_utils.tree_get(state, "num_linesearch_steps")
    # The zoom search stored the gradient at the new iterate: the loop tests it, so it stops at
    # the same iterate as the other solvers (the loop of Optax's documentation tests the gradient
    # of the previous iterate and takes one more step).
    new_grad = optax.tree_utils.tree_get(state, "grad")
    return optax.apply_updates(x, updates), state, steps + 1, new_grad, evals + searched.astype(jnp.int32)

  def cond(carry):
    _, _, steps, grad, _ = carry
    return (steps < MAX_STEPS) & (jnp.sqrt(jnp.sum(grad * grad)) > tol)

  @jax.jit
  def solve(x0):
    carry = (x0, opt.init(x0), jnp.int32(0), jnp.full_like(x0, jnp.inf), jnp.int32(1))
    x, _, steps, _, evals = jax.lax.while_loop(cond, body, carry)
    return x, evals, steps

  return solve


def optimistix_solver(problem, which):
  fun, tol = problem["fun"], problem.get("tol", TOLERANCE)
  solver = (optimistix.BFGS if which == "BFGS" else optimistix.LBFGS)(rtol=tol, atol=tol)

  @jax.jit
  def solve(x0):
    sol = optimistix.minimise(lambda x, _: fun(x), solver, x0, max_steps=MAX_STEPS, throw=False)
    return sol.value, jnp.int32(-1), sol.stats["num_steps"]

  def counted(x0):
    calls = []

    def counting(x, _):
      jax.debug.callback(lambda: calls.append(1))
      return fun(x)

    sol = optimistix.minimise(counting, solver, jnp.asarray(x0), max_steps=MAX_STEPS, throw=False)
    jax.block_until_ready(sol.value)
    return len(calls)

  return solve, counted


def scipy_solve(problem, value_and_grad):
  """scipy's L-BFGS-B to the first iterate whose Euclidean (projected) gradient norm is at most the
  tolerance, the test every other solver here runs. Its own test is on the max norm
  (``max |projected grad| <= gtol``), which stops up to sqrt(n) times earlier, so it gets
  ``gtol = tol / sqrt(n)`` (its test can then only pass where ours does) and a callback that checks
  the Euclidean norm at every new iterate and stops it there. Evaluations are counted in the
  objective wrapper, up to that iterate."""
  bounds = problem.get("bounds")
  tol = problem.get("tol", TOLERANCE)
  x0 = np.asarray(problem["x0"], np.float64)
  calls, last, trace = [0], {}, []

  def f(x):
    value, grad = value_and_grad(jnp.asarray(x, DTYPE))
    calls[0] += 1
    last["x"], last["grad"] = np.array(x), np.asarray(grad, np.float64)
    if calls[0] == 1:
      trace.append((1, _projected_norm(x, last["grad"], bounds)))
    return float(value), last["grad"]

  def callback(intermediate_result):
    x = intermediate_result.x
    # L-BFGS-B's last evaluation is at the new iterate; evaluate again (uncounted) if it is not.
    grad = last["grad"] if np.array_equal(last.get("x"), x) else np.asarray(
        value_and_grad(jnp.asarray(x, DTYPE))[1], np.float64)
    norm = _projected_norm(x, grad, bounds)
    trace.append((calls[0], norm))
    if norm <= tol:
      raise StopIteration

  result = scipy.optimize.minimize(
      f, x0, jac=True, method="L-BFGS-B", callback=callback,
      bounds=None if bounds is None else list(zip(*bounds)),
      options={"gtol": tol / np.sqrt(x0.size), "ftol": 0.0, "maxcor": 10, "maxiter": MAX_STEPS,
               "maxfun": 10 * MAX_STEPS})
  return result.x, calls[0], result.nit, trace


def steadax_trace(problem):
  """(evaluations, gradient norm) at every iterate of ``steadax.minimize``, from its callback (an
  untimed run)."""
  x0, bounds = jnp.asarray(problem["x0"]), problem.get("bounds")
  _, grad = jax.value_and_grad(problem["fun"])(x0)
  trace = [(1, _projected_norm(x0, grad, bounds))]

  def record(info):
    trace.append((int(info.num_fun_evals), float(info.grad_norm)))

  x, _ = steadax.minimize(problem["fun"], x0, tol=problem.get("tol", TOLERANCE), max_steps=MAX_STEPS,
                          bounds=bounds, callback=record)
  jax.block_until_ready(x)
  jax.effects_barrier()
  return trace


def evals_to(trace, level):
  """The evaluations up to the first iterate whose gradient norm is at most ``level`` (None if
  none is)."""
  return next((evals for evals, norm in trace if norm <= level), None)


def common_evals(ours, theirs, tol):
  """Evaluations of two traces to the same gradient norm: the tolerance when both reach it, else the
  smallest norm both reach (scipy's float64 line search on float32 values can stop short of it)."""
  level = max(tol, min(n for _, n in ours), min(n for _, n in theirs))
  return level, evals_to(ours, level), evals_to(theirs, level)


def _log(message: str) -> None:
  print(f"[solvers] {message}", file=sys.stderr, flush=True)


def _timed(fn, rounds_s):
  t0 = time.perf_counter()
  out = fn()
  rounds_s.append(time.perf_counter() - t0)
  return out


def paired_ratio(ours, theirs, rounds: int) -> dict:
  """Median over alternating rounds of ``time(ours) / time(theirs)``, each round timing a batch of
  calls of about 5 ms of each, one right after the other (a 2-d solve takes ~70 us: one call per
  sample, as in the table's rounds, measures the timer and dispatch jitter as much as the solver).
  Pairing cancels the machine's slow drifts. At least ``rounds`` rounds, up to 60 within about
  ``0.7 * rounds`` seconds (60 for the small problems in both ``make bench`` and ``--quick``)."""
  t0 = time.perf_counter()
  ours()
  one = time.perf_counter() - t0
  calls = max(1, int(0.005 / max(one, 1e-9)))
  rounds = max(rounds, min(60, int(0.7 * rounds / (2 * calls * one))))

  def batch(fn):
    t0 = time.perf_counter()
    for _ in range(calls):
      fn()
    return time.perf_counter() - t0

  ratios = []
  for r in range(rounds):
    if r % 2 == 0:
      a = batch(ours)
      b = batch(theirs)
    else:
      b = batch(theirs)
      a = batch(ours)
    ratios.append(a / b)
  quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
  return {"median": statistics.median(ratios), "quartiles": [quartiles[0], quartiles[2]],
          "rounds": rounds, "calls_per_round": calls}


def run_problem(problem, rounds: int, progress) -> tuple[list[dict], dict]:
  value_and_grad = jax.jit(jax.value_and_grad(problem["fun"]))
  x0 = jnp.asarray(problem["x0"])
  solvers, compile_s, counted = {}, {}, {}
  jitted = [("steadax", steadax_solver(problem))]
  if "bounds" not in problem:
    jitted.append(("optax", optax_solver(problem)))
    if optimistix is not None:
      for which in ("BFGS", "LBFGS"):
        solve, count = optimistix_solver(problem, which)
        jitted.append((f"optimistix {which}", solve))
        counted[f"optimistix {which}"] = count
  for label, solve in jitted:
    _log(f"{problem['name']}: compile {label}")
    t0 = time.perf_counter()
    jax.block_until_ready(solve(x0))
    compile_s[label] = time.perf_counter() - t0
    solvers[label] = lambda solve=solve: jax.block_until_ready(solve(x0))
  solvers["scipy L-BFGS-B"] = lambda: scipy_solve(problem, value_and_grad)
  solvers["scipy L-BFGS-B"]()  # warm-up (compiles value_and_grad)
  labels = list(solvers)
  times = {label: [] for label in labels}
  outcome = {}
  for r in range(rounds):
    _log(f"{problem['name']}: round {r + 1}/{rounds}")
    for label in (labels if r % 2 == 0 else labels[::-1]):
      outcome[label] = _timed(solvers[label], times[label])
  paired = None
  if "optax" in solvers:
    _log(f"{problem['name']}: paired steadax/optax rounds")
    paired = paired_ratio(solvers["steadax"], solvers["optax"], rounds)
  rows = []
  scipy_trace = outcome["scipy L-BFGS-B"][3]
  level, ours, theirs = common_evals(steadax_trace(problem), scipy_trace, problem.get("tol", TOLERANCE))
  for label in labels:
    x, evals, steps = outcome[label][:3]
    evals = counted[label](x0) if label in counted else int(evals)
    _, grad = value_and_grad(jnp.asarray(x, DTYPE))
    norm = _projected_norm(x, grad, problem.get("bounds"))
    rows.append({"problem": problem["name"], "solver": label, "median_s": statistics.median(times[label]),
                 "rounds_s": times[label], "compile_s": compile_s.get(label), "fun_evals": evals,
                 "steps": int(steps), "value": float(problem["fun"](jnp.asarray(x, DTYPE))),
                 "grad_norm": norm, "tol": problem.get("tol", TOLERANCE),
                 "converged": bool(norm <= problem.get("tol", TOLERANCE))})
  progress.tick(problem["name"])
  return rows, {"grad_norm": level, "steadax": ours, "scipy": theirs, "paired": paired}


def multi_start(rounds: int) -> dict:
  starts = np.random.default_rng(1).uniform(-2.0, 2.0, size=(MULTI_STARTS, MULTI_DIM)).astype(DTYPE)
  # As for 1000-d Rosenbrock: float32 gradients at this minimiser carry ~2e-5 of rounding.
  tolerance = TOLERANCE if X64 else 1e-4
  tol = jnp.asarray(tolerance, DTYPE)
  batched = jax.jit(jax.vmap(lambda x: steadax.minimize(rosenbrock, x, tol=tol, max_steps=MAX_STEPS)))
  t0 = time.perf_counter()
  jax.block_until_ready(batched(jnp.asarray(starts)))
  compile_s = time.perf_counter() - t0
  problem = {"x0": starts[0], "fun": rosenbrock, "tol": tolerance}
  value_and_grad = jax.jit(jax.value_and_grad(rosenbrock))

  def scipy_all():
    return [scipy_solve(dict(problem, x0=s), value_and_grad) for s in starts]

  scipy_all()  # warm-up
  times = {"steadax": [], "scipy": []}
  for r in range(rounds):
    order = [("steadax", lambda: jax.block_until_ready(batched(jnp.asarray(starts)))), ("scipy", scipy_all)]
    for label, fn in (order if r % 2 == 0 else order[::-1]):
      out = _timed(fn, times[label])
      if label == "steadax":
        ours = out
      else:
        theirs = out
  x, info = ours
  found = np.asarray(info.value) < 1e-6
  scipy_found = np.array([float(rosenbrock(jnp.asarray(t[0], DTYPE))) < 1e-6 for t in theirs])
  medians = {k: statistics.median(v) for k, v in times.items()}
  return {"starts": MULTI_STARTS, "dim": MULTI_DIM, "tol": tolerance, "median_s": medians, "rounds_s": times,
          "compile_s": compile_s, "converged": int(np.sum(np.asarray(info.converged))),
          "global_minimum_found": {"steadax": int(found.sum()), "scipy": int(scipy_found.sum())},
          "fun_evals": {"steadax": int(np.sum(np.asarray(info.num_fun_evals))),
                        "scipy": int(sum(t[1] for t in theirs))},
          "speedup": medians["scipy"] / medians["steadax"]}


def run(sizes: harness.Sizes, progress: harness.Progress) -> dict:
  cases = problems()
  progress.start("solvers", len(cases) + 1)
  rows, common = [], {}
  for problem in cases:
    problem_rows, common[problem["name"]] = run_problem(problem, sizes.lbfgs_rounds, progress)
    rows += problem_rows
  _log("multi-start")
  multi = multi_start(max(1, sizes.lbfgs_rounds // 3))
  progress.tick("multi-start")
  ratios = {}
  for name in dict.fromkeys(r["problem"] for r in rows):
    by = {r["solver"]: r for r in rows if r["problem"] == name}
    # Evaluations to the same gradient norm: the tolerance, or the smallest norm both reach.
    entry = {"steadax/scipy evals": common[name]["steadax"] / common[name]["scipy"],
             "evals at grad norm": common[name]["grad_norm"], "evals": common[name],
             "steadax/scipy time": by["steadax"]["median_s"] / by["scipy L-BFGS-B"]["median_s"]}
    if common[name]["paired"] is not None:
      entry["steadax/optax time"] = common[name]["paired"]["median"]
      entry["steadax/optax time quartiles"] = common[name]["paired"]["quartiles"]
    ratios[name] = entry
  return {"kind": "solvers", "tolerance": TOLERANCE, "x64": X64, "rows": rows, "ratios": ratios,
          "multi_start": multi}


def table(result: dict) -> list[str]:
  header = ["problem", "solver", "time ms", "f-evals", "steps", "grad norm", "compile s"]
  body = []
  for r in result["rows"]:
    body.append([r["problem"] + (f" (tol {r['tol']:g})" if r["tol"] != result["tolerance"] else ""), r["solver"], report._ms(r["median_s"]), str(r["fun_evals"]), str(r["steps"]),
                 f"{r['grad_norm']:.1e}" + ("" if r["converged"] else " (not converged)"),
                 "" if r["compile_s"] is None else f"{r['compile_s']:.2f}"])
  ratio_header = ["problem", "steadax/optax time (quartiles)", "steadax/scipy f-evals",
                  "f-evals to grad norm", "steadax/scipy time"]
  ratio_body = [[name, (f"{v['steadax/optax time']:.2f} ({v['steadax/optax time quartiles'][0]:.2f}-"
                        f"{v['steadax/optax time quartiles'][1]:.2f})")
                 if "steadax/optax time" in v else "n/a (no bounds)",
                 f"{v['steadax/scipy evals']:.2f} ({v['evals']['steadax']}/{v['evals']['scipy']})",
                 f"{v['evals at grad norm']:.1e}", f"{v['steadax/scipy time']:.3f}"]
                for name, v in result["ratios"].items()]
  m = result["multi_start"]
  multi = (f"Multi-start, {m['starts']} starts on {m['dim']}-d Rosenbrock (tol {m['tol']:g}): one vmapped minimize "
           f"{report._ms(m['median_s']['steadax'])} ms against {m['starts']} sequential scipy runs "
           f"{report._ms(m['median_s']['scipy'])} ms: {m['speedup']:.1f}x faster; {m['converged']}/"
           f"{m['starts']} converged; global minimum found by {m['global_minimum_found']['steadax']} "
           f"(scipy {m['global_minimum_found']['scipy']}); f-evals {m['fun_evals']['steadax']} "
           f"(scipy {m['fun_evals']['scipy']}).")
  precision = "float64 (x64)" if result["x64"] else "float32"
  return [f"To a Euclidean (projected) gradient norm <= {result['tolerance']:g}, {precision}, for every "
          "solver (scipy stopped by a callback at the first such iterate).", "", *report._markdown(header, body), "", *report._markdown(ratio_header, ratio_body),
          "", multi]


# The table is registered here, beside the case, so report.py needs no edit for a new kind.
report.TITLES.setdefault("solvers", "Deterministic solvers (steadax.minimize):")
report.TABLES.setdefault("solvers", table)
