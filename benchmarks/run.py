"""``make bench``: steadax against Optax, side by side in one process.

Runs the cases (``benchmarks/cases``), prints the tables, writes
``benchmarks/results/<machine>-<date>.json`` and a chart beside it, and rewrites the benchmark
section of README.md between its markers (full runs of every case only, unless ``--no-readme``).

  python -m benchmarks.run                     # every case, full sizes
  python -m benchmarks.run --quick             # smaller sizes, fewer rounds (a couple of minutes)
  python -m benchmarks.run --cases big,lbfgs   # some cases (README untouched)
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

if __package__ in (None, ""):  # run as a script: python benchmarks/run.py
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import harness, report  # noqa: E402
from benchmarks.cases import CASES  # noqa: E402


def run_cases(names: list[str], sizes: harness.Sizes, progress: harness.Progress) -> dict:
  """Runs the named cases in order; each result gains the case's wall time."""
  results = {}
  for name in names:
    t0 = time.perf_counter()
    results[name] = CASES[name](sizes, progress)
    results[name]["wall_s"] = time.perf_counter() - t0
  progress.close()
  return results


def _parse(argv) -> argparse.Namespace:
  parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--quick", action="store_true",
                      help="smaller trees and fewer rounds: a check that it runs, not figures")
  parser.add_argument("--cases", default=",".join(CASES),
                      help=f"comma-separated, from: {', '.join(CASES)} (default: all)")
  parser.add_argument("--no-readme", action="store_true", help="leave README.md as it is")
  parser.add_argument("--no-progress", action="store_true", help="no progress bars")
  args = parser.parse_args(argv)
  args.cases = [c.strip() for c in args.cases.split(",") if c.strip()]
  unknown = [c for c in args.cases if c not in CASES]
  if unknown:
    parser.error(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}")
  return args


def main(argv=None) -> dict:
  args = _parse(argv)
  if "lm" in args.cases:
    from benchmarks.cases import lm
    lm.set_cpu_flag()  # before the backend starts (report.machine() starts it)
  machine = report.machine()
  mode = "quick" if args.quick else "full"
  sizes = harness.QUICK if args.quick else harness.FULL
  every_case = set(args.cases) == set(CASES)
  t0 = time.perf_counter()
  results = run_cases(args.cases, sizes, harness.Progress(enabled=not args.no_progress))
  wall_s = time.perf_counter() - t0

  stem = f"{machine['slug']}-{machine['date']}" + ("-quick" if args.quick else "")
  stem += "" if every_case else "-partial"
  json_path = os.path.join(report.RESULTS, stem + ".json")
  chart_path = os.path.join(report.RESULTS, stem + ".png")
  report.write_json(json_path, {"machine": machine, "mode": mode, "cases_run": args.cases,
                                "sizes": dataclasses.asdict(sizes), "wall_s": wall_s,
                                "results": results})
  title = (f"steadax vs Optax, {mode} run: {machine['cpu']}, {machine['cores']} cores, "
           f"jax {machine['jax']}, {machine['date']}, {machine['git_commit']}")
  if not report.chart(chart_path, results, title):
    chart_path = None
  extra = []
  if "lm" in results:
    extra.append(report.lm_chart_path(os.path.join(report.RESULTS, stem)))
    report.lm_chart(extra[-1], results["lm"], title)
  if "grid" in results:
    from benchmarks.cases import grid
    extra.append(grid.chart_path(os.path.join(report.RESULTS, stem)))
    grid.chart(extra[-1], results["grid"], title)
  text = report.tables(results)
  print(f"\n{report.describe(machine)}\n{mode} mode, {wall_s:.0f} s\n\n{text}\n")
  print("wrote", ", ".join(os.path.relpath(p) for p in (json_path, chart_path, *extra) if p))
  if every_case and not args.no_readme:
    if report.update_readme(report.readme_block(machine, mode, wall_s, text, chart_path)):
      print("updated the benchmark section of README.md")
    else:
      print(f"README.md has no {report.README_START} ... {report.README_END} markers; not updated")
  return results


if __name__ == "__main__":
  main()
