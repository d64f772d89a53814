"""``import steadax`` against ``import optax``, after ``import jax``, in fresh processes.

Each measurement is one fresh interpreter that imports jax, then times the import of one library
(``time.perf_counter`` around the ``import`` statement), and separately the import plus the first
``adam(1e-3)`` and its ``init`` on one parameter (a lazy import moves work to first use: this
column shows where it went). Runs alternate between the libraries; the figures are medians. The
processes use a bytecode cache (as an installed package does), in a temporary directory, warmed by
one untimed run of each.

  python -m benchmarks.import_time            # 15 runs of each
  python -m benchmarks.import_time --runs 5
  python -m benchmarks.import_time --importtime   # also `python -X importtime`'s top entries
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_IMPORT = "import jax, time\nt = time.perf_counter()\nimport {lib}\nprint(time.perf_counter() - t)\n"
_FIRST_USE = ("import jax, jax.numpy as jnp, time\nt = time.perf_counter()\nimport {lib}\n"
              "tx = {lib}.adam(1e-3)\ntx.init(jnp.ones(2))\nprint(time.perf_counter() - t)\n")


def _env(cache: str) -> dict:
  env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
  env["PYTHONPYCACHEPREFIX"] = cache
  env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "src"), env.get("PYTHONPATH", "")])
  return env


def _seconds(code: str, env: dict) -> float:
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       check=True)
  return float(out.stdout.strip().splitlines()[-1])


def importtime_top(lib: str, env: dict, n: int = 8) -> list[tuple[str, float]]:
  """``python -X importtime``: the ``n`` largest cumulative entries under ``lib``'s import (ms)."""
  code = f"import jax\nimport {lib}\n"
  err = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True,
                       text=True, env=env, check=True).stderr
  lines = err.splitlines()
  start = max(i for i, line in enumerate(lines) if re.search(r"\|\s+jax$", line)) + 1
  rows = []
  for line in lines[start:]:
    parts = line.split("|")
    if len(parts) == 3:
      rows.append((parts[2].rstrip(), int(parts[1]) / 1000))
  return sorted(rows, key=lambda r: -r[1])[:n]


def run(runs: int = 15) -> dict:
  """Median seconds of each measurement for each library, their difference and ratio."""
  with tempfile.TemporaryDirectory() as cache:
    env = _env(cache)
    samples: dict = {(lib, what): [] for lib in ("optax", "steadax") for what in ("import", "first_use")}
    for lib in ("optax", "steadax"):  # warm the bytecode cache
      _seconds(_FIRST_USE.format(lib=lib), env)
    for _ in range(runs):
      for lib in ("optax", "steadax"):
        samples[(lib, "import")].append(_seconds(_IMPORT.format(lib=lib), env))
        samples[(lib, "first_use")].append(_seconds(_FIRST_USE.format(lib=lib), env))
  med = {f"{lib}_{what}_s": statistics.median(v) for (lib, what), v in samples.items()}
  return {
      **med,
      "runs": runs,
      "import_difference_s": med["steadax_import_s"] - med["optax_import_s"],
      "import_ratio": med["steadax_import_s"] / med["optax_import_s"],
      "first_use_difference_s": med["steadax_first_use_s"] - med["optax_first_use_s"],
      "first_use_ratio": med["steadax_first_use_s"] / med["optax_first_use_s"],
  }


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(prog="python -m benchmarks.import_time", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--runs", type=int, default=15)
  parser.add_argument("--importtime", action="store_true")
  args = parser.parse_args(argv)
  result = run(args.runs)
  print(f"median of {args.runs} fresh processes each, after `import jax`:")
  print(f"  import:                  optax {result['optax_import_s'] * 1e3:7.1f} ms   steadax "
        f"{result['steadax_import_s'] * 1e3:7.1f} ms   difference {result['import_difference_s'] * 1e3:+7.1f} ms"
        f"   steadax/optax {result['import_ratio']:.2f}")
  print(f"  import + adam + init:    optax {result['optax_first_use_s'] * 1e3:7.1f} ms   steadax "
        f"{result['steadax_first_use_s'] * 1e3:7.1f} ms   difference "
        f"{result['first_use_difference_s'] * 1e3:+7.1f} ms   steadax/optax {result['first_use_ratio']:.2f}")
  if args.importtime:
    with tempfile.TemporaryDirectory() as cache:
      env = _env(cache)
      for lib in ("optax", "steadax"):
        importtime_top(lib, env)  # warm
        print(f"python -X importtime, {lib} (cumulative ms):")
        for name, ms in importtime_top(lib, env):
          print(f"  {ms:8.1f}  {name}")
  return result


if __name__ == "__main__":
  if __package__ in (None, ""):
    sys.path.insert(0, ROOT)
  main()
