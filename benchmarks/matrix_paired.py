"""The matrix optimizers against another version of steadax, or another ``MatrixExecution``, paired
in one process (issue 33 §2: steps and compile times no slower than before).

The old source is imported as a second package (``--old PATH/src``: copied to a temporary
directory as ``steadax_old``), so both versions compile and run on the same load: for every
optimizer and depth (``benchmarks/cases/matrix_depth.py``'s layers), each column's update is traced,
lowered and compiled afresh ``--repetitions`` times (the columns alternating; CPU seconds of the
process, the persistent cache off), then the compiled steps are timed in alternating rounds (the
order reversed every other round; process CPU seconds and wall seconds per step, medians). Ratios
are against the first column.

  python -m benchmarks.matrix_paired --old /path/to/old/src --depths 2,8,32
  python -m benchmarks.matrix_paired --columns auto,whole --depths 8,32   # the CPU chunks' worth
"""

from __future__ import annotations

import argparse
import importlib
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import jax

import steadax

from .cases import matrix_depth

FACTORIES = {
    "muon": lambda lib, **kw: lib.contrib.muon(1e-3, **kw),
    "soap": lambda lib, **kw: lib.soap(1e-3, **kw),
    "shampoo": lambda lib, **kw: lib.shampoo(1e-3, **kw),
    "psgd_kron": lambda lib, **kw: lib.psgd_kron(1e-3, **kw),
    "galore": lambda lib, **kw: lib.contrib.galore(1e-3, rank=16, **kw),
}


def columns(names: list[str], old: str | None) -> dict:
  """name -> (library, keyword arguments): ``old`` (the other version's default), ``auto`` (this
  version's default), ``whole`` (one batch per group), ``alone`` (every parameter on its own)."""
  out = {}
  for name in names:
    if name == "old":
      out[name] = (_import_old(old), {})
    else:
      execution = {"auto": steadax.MatrixExecution(), "whole": steadax.MatrixExecution(chunks=None),
                   "alone": steadax.MatrixExecution(grouping=False)}[name]
      out[name] = (steadax, {"execution": execution})
  return out


def _import_old(src: str | None):
  if src is None:
    raise SystemExit("--old PATH/src is needed for the 'old' column")
  root = Path(tempfile.mkdtemp(prefix="steadax_old_"))
  shutil.copytree(Path(src) / "steadax", root / "steadax_old")
  sys.path.insert(0, str(root))
  return importlib.import_module("steadax_old")


def _cpu_compile(tx, grads, params):
  state = jax.jit(tx.init)(params)
  update = jax.jit(lambda g, s, p: tx.update(g, s, p))
  c0 = time.process_time()
  compiled = update.lower(grads, state, params).compile()
  cpu = time.process_time() - c0
  for _ in range(2):  # a step that refreshes nothing (SOAP and Shampoo refresh at 1, 11, ...)
    state = compiled(grads, state, params)[1]
  return cpu, compiled, jax.block_until_ready(state)


def measure(optimizers, cols: dict, depths, repetitions: int, rounds: int, block_s: float = 0.05) -> list:
  rows = []
  for depth in depths:
    params = matrix_depth.layers(depth)
    grads = jax.tree.map(lambda p: p * 0.5 + 1e-3, params)
    for name in optimizers:
      cpus: dict = {c: [] for c in cols}
      programs = {}
      for rep in range(repetitions):
        for c in (list(cols) if rep % 2 == 0 else list(cols)[::-1]):
          lib, kw = cols[c]
          cpu, compiled, state = _cpu_compile(FACTORIES[name](lib, **kw), grads, params)
          cpus[c].append(cpu)
          programs[c] = (compiled, state)
      steps: dict = {c: ([], []) for c in cols}
      for r in range(rounds):
        for c in (list(cols) if r % 2 == 0 else list(cols)[::-1]):
          compiled, state = programs[c]
          jax.block_until_ready(compiled(grads, state, params))
          n, c0, t0 = 0, time.process_time(), time.perf_counter()
          while time.perf_counter() - t0 < block_s or n == 0:
            jax.block_until_ready(compiled(grads, state, params))
            n += 1
          steps[c][0].append((time.process_time() - c0) / n)
          steps[c][1].append((time.perf_counter() - t0) / n)
      row = {"optimizer": name, "depth": depth}
      for c in cols:
        row[c] = {"compile_cpu_s": statistics.median(cpus[c]), "step_cpu_ms": 1e3 * statistics.median(steps[c][0]),
                  "step_wall_ms": 1e3 * statistics.median(steps[c][1])}
      first = list(cols)[0]
      for c in list(cols)[1:]:
        row[f"{c}/{first}"] = {k: row[c][k] / row[first][k] for k in row[first]}
      rows.append(row)
      print(json.dumps(row), flush=True)
  return rows


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(prog="python -m benchmarks.matrix_paired", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--old", default=None, help="the src directory of the other version")
  parser.add_argument("--columns", default="old,auto")
  parser.add_argument("--optimizers", default=",".join(FACTORIES))
  parser.add_argument("--depths", default="2,8,32")
  parser.add_argument("--repetitions", type=int, default=2)
  parser.add_argument("--rounds", type=int, default=20)
  parser.add_argument("--json", default=None)
  args = parser.parse_args(argv)
  jax.config.update("jax_enable_compilation_cache", False)
  jax.config.update("jax_numpy_dtype_promotion", "standard")
  cols = columns(args.columns.split(","), args.old)
  rows = measure(args.optimizers.split(","), cols, [int(d) for d in args.depths.split(",")], args.repetitions,
                 args.rounds)
  if args.json:
    Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
  main()
