"""steadax.minimize against Optax's jitted L-BFGS loop, time only, as precisely as one process allows.

The ``solvers`` case of ``make bench`` times every solver in the same rounds; this script times
only steadax against Optax, with more rounds (``solvers.paired_ratio``: per-round ratios of ~5 ms
batches of solves, alternating which goes first), for a table of ratios with quartiles:

  python -m benchmarks.solvers_paired                       # every problem without bounds
  JAX_ENABLE_X64=1 python -m benchmarks.solvers_paired --rounds 60 "Rosenbrock 2-d"

Prints one line per problem: the median ratio steadax/Optax, its quartiles, and the evaluation and
step counts of both (equal when both follow the same iterates).
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp

from .cases import solvers


def main(argv: list[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("problems", nargs="*", help="problem names (default: all without bounds)")
  parser.add_argument("--rounds", type=int, default=60, help="alternating rounds (default 60)")
  args = parser.parse_args(argv)
  problems = [p for p in solvers.problems() if "bounds" not in p]
  if args.problems:
    known = {p["name"]: p for p in problems}
    unknown = [n for n in args.problems if n not in known]
    if unknown:
      parser.error(f"unknown problems {unknown}; known: {sorted(known)}")
    problems = [known[n] for n in args.problems]
  precision = "float64 (x64)" if solvers.X64 else "float32"
  print(f"steadax.minimize / Optax's jitted lbfgs loop, wall time, {precision}, {args.rounds} rounds")
  for problem in problems:
    x0 = jnp.asarray(problem["x0"])
    ours, theirs = solvers.steadax_solver(problem), solvers.optax_solver(problem)
    a, b = jax.block_until_ready(ours(x0)), jax.block_until_ready(theirs(x0))
    paired = solvers.paired_ratio(lambda: jax.block_until_ready(ours(x0)),
                                  lambda: jax.block_until_ready(theirs(x0)), args.rounds)
    low, high = paired["quartiles"]
    print(f"{problem['name']}: {paired['median']:.3f} (quartiles {low:.3f}-{high:.3f}; "
          f"{paired['rounds']} rounds of {paired['calls_per_round']} calls); f-evals/steps "
          f"steadax {int(a[1])}/{int(a[2])}, optax {int(b[1])}/{int(b[2])}", flush=True)


if __name__ == "__main__":
  main()
