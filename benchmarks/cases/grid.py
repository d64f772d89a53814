"""The shape grid (issue 24): every path against Optax over leaf counts, leaf sizes and structures.

One model family tells little: a path that pays on 400 random-sized leaves may lose on a deep stack
of identical layers. The grid crosses leaf count (10 ... 2,000), leaf size (16 ... 1M elements) and
five structures (``benchmarks/grid_models.py``: an elementwise-only loss, a deep MLP,
transformer-like blocks, a Flax NNX MLP and an Equinox MLP), sparsely: ``CELLS`` lists the points.
For each cell and each column (Optax, steadax per leaf, ``fuse``, flat parameters; NNX has no flat
column) AdamW's

* first call of the training step (trace, compile, one step): measured once, in a fresh Python
  process per point (as ``cases/first_call.py``), wall and process CPU seconds (compilation runs
  on XLA's threads; on a shared machine the CPU seconds are the steadier figure), stopped after
  ``compile_time_limit_s``; with that process's peak resident memory and XLA's peak memory of the
  compiled step (params, batch, state, temporaries);
* step time of the training step and of the update step (gradients passed in): every column's
  steps in this process, timed in alternating rounds (``harness.time_rounds``' scheme: the order
  reversed every other round), each round a block of steps of about ``ROUND_S``, the median kept;
  the ratios use the process's CPU time per step (on a 2-core machine shared with other work the
  wall time measures the other work as much as the step; both are kept).

Ratios: per leaf against Optax, and ``fuse`` and flat parameters against the per-leaf path (the
issue's goals: <= 1.05 and <= 1.0). ``chart`` draws one heat map per ratio.

  python -m benchmarks.run --cases grid [--quick] --no-readme
  python -m benchmarks.cases.grid --cells "mlp 50x16,elementwise 100x256"   # some cells, printed
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

import jax

from .. import grid_models, harness
from ..grid_models import COLUMNS, FLAT_ALL, FUSED_ALL, Cell

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROUND_S = 0.04  # seconds of steps per timed block (at least one step)
KINDS = ("train", "update")


def adamw(lib: Any) -> Any:
  return lib.adamw(1e-3)


def _cells(*specs: str) -> tuple[Cell, ...]:
  out = []
  for spec in specs:
    structure, dims = spec.split()
    depth, width = dims.split("x")
    out.append(Cell(structure, int(depth), int(width)))
  return tuple(out)


# Leaf counts 10 ... 2,000 and leaf sizes 16 ... 1M elements, sparsely: the elementwise structure
# spans both axes (its leaves never share a kernel); the deep structures add repeated layers (their
# identical layers share kernels on the per-leaf path); NNX and Equinox the frameworks' own steps.
CELLS = {
    "full": _cells(
        "elementwise 10x16", "elementwise 10x1048576", "elementwise 100x16", "elementwise 100x4096",
        "elementwise 100x65536", "elementwise 2000x16",
        "mlp 5x16", "mlp 5x1024", "mlp 50x4", "mlp 50x64", "mlp 50x256", "mlp 500x4",
        "transformer 1x16", "transformer 1x256", "transformer 8x16", "transformer 8x64",
        "transformer 8x256", "nnx 5x64", "nnx 50x16", "equinox 5x64", "equinox 50x16"),
    # One small cell per structure: 4 minutes at a load of 3.5 on 2 cores, mostly compiling.
    "quick": _cells("elementwise 50x256", "mlp 25x16", "transformer 1x32", "nnx 8x16",
                    "equinox 8x16"),
    "smoke": _cells("mlp 5x1", "equinox 1x2", "nnx 1x2"),
}


# -- first call, in a fresh process ------------------------------------------------------------------

def measure_first_call(cell: Cell, label: str, time_limit_s: float) -> dict:
  """The training step's first call in this process (set-up and ``init`` before it excluded).

  For the plain JAX structures the phases are timed apart (``jit(...).trace``, ``.lower``,
  ``.compile``, the call) with the size of the lowered program, which tells a slower compilation
  of the same program (noise) from a larger program. A watchdog ends the process, reporting the
  point as stopped, after ``time_limit_s``.
  """
  fn, args = grid_models.steps(cell, label, "train", adamw)

  def stop():
    print(json.dumps({"wall_s": None, "cpu_s": None, "stopped_after_s": time_limit_s}), flush=True)
    os._exit(0)

  watchdog = threading.Timer(time_limit_s, stop)
  watchdog.daemon = True  # a failing step ends the process at once, not after the time limit
  watchdog.start()
  t0, c0 = time.perf_counter(), time.process_time()
  phases = {}
  if grid_models.model(cell).framework == "jax":
    traced = fn.trace(*args)
    c1 = time.process_time()
    lowered = traced.lower()
    c2 = time.process_time()
    compiled = lowered.compile()
    c3 = time.process_time()
    jax.block_until_ready(compiled(*args))
    phases = {"trace_cpu_s": c1 - c0, "lower_cpu_s": c2 - c1, "compile_cpu_s": c3 - c2,
              "lowered_lines": lowered.as_text().count("\n")}
  else:
    out = grid_models.first_result(cell, fn, args)
    if out is not None:
      args = (out[0], out[1], args[2])
    compiled = None
  wall, cpu = time.perf_counter() - t0, time.process_time() - c0
  watchdog.cancel()
  if compiled is None:
    # The executable is cached: lowering and compiling again only reads the analysis.
    lowered = fn.lower(*args)
    compiled = getattr(lowered, "lowered", lowered).compile()
  stats = compiled.memory_analysis()
  return {"wall_s": wall, "cpu_s": cpu, **phases, "peak_rss_bytes": harness.peak_rss_bytes(),
          "peak_bytes": None if stats is None else int(stats.peak_memory_in_bytes)}


_CHILD = ("import json, sys; from benchmarks.cases.grid import measure_first_call; "
          "from benchmarks.grid_models import Cell; "
          "print(json.dumps(measure_first_call(Cell(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])), "
          "sys.argv[4], float(sys.argv[5]))))")


def first_call_in_child(cell: Cell, label: str, time_limit_s: float) -> dict:
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(
      [os.path.join(ROOT, "src"), ROOT, os.environ.get("PYTHONPATH", "")]))
  # The suite's own processes may run under strict promotion; Optax's code is not written for it.
  env["JAX_NUMPY_DTYPE_PROMOTION"] = "standard"
  env["JAX_NUMPY_RANK_PROMOTION"] = "allow"
  try:
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, cell.structure, str(cell.depth), str(cell.width), label,
         str(time_limit_s)], cwd=ROOT, capture_output=True, text=True, check=True, env=env)
  except subprocess.CalledProcessError as error:
    raise RuntimeError(f"grid: first call of {cell.name}, {label} failed:\n{error.stderr}") from error
  return json.loads(child.stdout.strip().splitlines()[-1])


# -- step times, in this process ---------------------------------------------------------------------

def _time_alternating(runners: dict[str, grid_models.Runner], rounds: int) -> dict[str, dict]:
  """Median wall and CPU seconds per step of each runner, over rounds in alternating order."""
  labels = list(runners)
  block = {}
  for label in labels:
    wall, _ = runners[label].run(1)  # warm: allocator, caches
    block[label] = max(1, min(200, round(ROUND_S / max(wall, 1e-6))))
  times: dict[str, list] = {label: [] for label in labels}
  for r in range(rounds):
    for label in (labels if r % 2 == 0 else labels[::-1]):
      times[label].append(runners[label].run(block[label]))
  return {label: {"wall_s": statistics.median(t[0] for t in ts),
                  "cpu_s": statistics.median(t[1] for t in ts),
                  "rounds_wall_s": [t[0] for t in ts], "steps_per_round": block[label]}
          for label, ts in times.items()}


def step_times(cell: Cell, labels: list[str], rounds: int, progress: harness.Progress) -> dict:
  """``{kind: {label: times}}``: each kind's columns compiled one after another, then timed.

  The update step's compile time in this process is kept too (``first_call_in_process_s``):
  measured after the training step of the same column was traced, so Python-side caches are warm.
  """
  out = {}
  for kind in KINDS:
    runners, compile_s = {}, {}
    for label in labels:
      progress.doing(f"{cell.name}: {kind} step, {label}")
      fn, args = grid_models.steps(cell, label, kind, adamw)
      t0 = time.perf_counter()
      first = grid_models.first_result(cell, fn, args)
      compile_s[label] = time.perf_counter() - t0
      if first is not None:
        args = (first[0], first[1], args[2])
      runners[label] = grid_models.runner(cell, fn, args)
    timed = _time_alternating(runners, rounds)
    for label in labels:
      timed[label]["first_call_in_process_s"] = compile_s[label]
    out[kind] = timed
    progress.tick(f"{cell.name}: {kind} steps")
  return out


def _ratio(num: float | None, den: float | None) -> float | None:
  return None if num is None or den is None or den == 0 else num / den


def _step(steps: dict, kind: str, label: str, key: str) -> float | None:
  return steps[kind][label][key] if label in steps[kind] else None


def ratios(first_call: dict, steps: dict) -> dict:
  """``"<column>/<reference>"`` -> metric -> ratio: per leaf against Optax, the others against
  per leaf (and against Optax)."""
  metrics = {
      "first call": lambda label: first_call.get(label, {}).get("cpu_s"),
      "first call (wall)": lambda label: first_call.get(label, {}).get("wall_s"),
      "train step": lambda label: _step(steps, "train", label, "cpu_s"),
      "update step": lambda label: _step(steps, "update", label, "cpu_s"),
      "train step (wall)": lambda label: _step(steps, "train", label, "wall_s"),
      "update step (wall)": lambda label: _step(steps, "update", label, "wall_s"),
      # A stopped first call has no figures but its time limit.
      "peak memory": lambda label: first_call.get(label, {}).get("peak_bytes"),
  }
  pairs = [("steadax", "optax"), (harness.FUSED, "steadax"), (harness.FLAT, "steadax"),
           (FUSED_ALL, "steadax"), (FLAT_ALL, "steadax"), (harness.FUSED, "optax"),
           (harness.FLAT, "optax"), (grid_models.OPTAX_AGAIN, "optax"),
           (grid_models.STEADAX_AGAIN, "optax")]
  return {f"{a}/{b}": {name: _ratio(get(a), get(b)) for name, get in metrics.items()}
          for a, b in pairs}


def _columns(cell: Cell) -> tuple[list[str], dict[str, str]]:
  """The cell's columns and the layouts of its fused and flat ones; the no-limit columns only
  where the limit on leaves of one shape changed the layout (elsewhere they are the same program)."""
  labels = [label for label in COLUMNS if grid_models.available(cell.structure, label)]
  layouts = {label: _layout(cell, label) for label in labels
             if label not in ("optax", "steadax")}
  for limited, unlimited in ((harness.FUSED, FUSED_ALL), (harness.FLAT, FLAT_ALL)):
    if unlimited in layouts and layouts[unlimited] == layouts[limited]:
      labels.remove(unlimited)
      del layouts[unlimited]
  return labels, layouts


def measure_cell(cell: Cell, sizes: harness.Sizes, progress: harness.Progress, flip: bool,
                 columns: tuple[str, ...] | None = None) -> dict:
  labels, layouts = _columns(cell)
  if columns is not None:
    again = (grid_models.OPTAX_AGAIN, grid_models.STEADAX_AGAIN)
    labels = [label for label in columns if label in labels or label in again]
  first_call = {}
  for label in (labels[::-1] if flip else labels):
    progress.doing(f"{cell.name}: first call, {label}")
    first_call[label] = first_call_in_child(cell, label, sizes.compile_time_limit_s)
    progress.tick(f"{cell.name}: first call, {label}")
  # A column whose first call ran out of time is not compiled again here (it would be unbounded).
  timed = [label for label in labels if first_call[label].get("cpu_s") is not None]
  steps = step_times(cell, timed, sizes.rounds, progress)
  return {"cell": cell.name, "structure": cell.structure, "depth": cell.depth, "width": cell.width,
          "leaves": grid_models.n_leaves(cell), "parameters": grid_models.n_parameters(cell),
          "largest_leaf": grid_models.largest_leaf(cell), "first_call": first_call,
          "steps": steps, "layouts": layouts, "ratios": ratios(first_call, steps),
          "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None}


def _layout(cell: Cell, label: str) -> str:
  """What the path made of the parameters (which leaves share buffers, which stay leaves)."""
  import steadax

  m = grid_models.model(cell)
  if m.framework == "nnx":
    from flax import nnx

    params = nnx.state(m.make_params(), nnx.Param)
  else:
    params = m.make_params()
  if label in grid_models.FLAT_COLUMNS:
    return repr(grid_models.flatten(label, params))
  _, tx = grid_models.transformation(label, adamw)
  return repr(jax.eval_shape(tx.init, params).layout)


def run(sizes: harness.Sizes, progress: harness.Progress, cells: tuple[Cell, ...] | None = None,
        on_row: Any = None, columns: tuple[str, ...] | None = None) -> dict:
  """The grid's rows. ``columns`` (default: all that apply) may name ``grid_models.OPTAX_AGAIN``,
  Optax's step compiled and timed a second time, which gives the noise of the measurement."""
  cells = CELLS[sizes.grid] if cells is None else cells
  tasks = sum(len([l for l in COLUMNS[:4] if grid_models.available(c.structure, l)]) + len(KINDS)
              for c in cells)  # about: the no-limit columns are added where they differ
  progress.start("grid", tasks)
  rows = []
  for i, cell in enumerate(cells):
    rows.append(measure_cell(cell, sizes, progress, flip=i % 2 == 1, columns=columns))
    if on_row is not None:
      on_row(rows[-1])
  return {"kind": "grid", "time_limit_s": sizes.compile_time_limit_s, "rounds": sizes.rounds,
          "rows": rows}


# -- the table and the chart -------------------------------------------------------------------------

CHART_RATIOS = ("steadax/optax", f"{harness.FUSED}/steadax", f"{harness.FLAT}/steadax",
                f"{FUSED_ALL}/steadax", f"{FLAT_ALL}/steadax")
CHART_METRICS = ("first call", "train step", "update step", "peak memory")
TABLE_METRICS = ("first call", "train step", "update step")


def _fmt(x: float | None) -> str:
  return "n/a" if x is None else f"{x:.2f}"


def _first_call_cell(call: dict | None) -> str:
  if call is None:
    return "n/a"
  if call.get("cpu_s") is None:
    return f"> {call['stopped_after_s']:.0f} (stopped)"
  return f"{call['cpu_s']:.1f}"


def _ms(times: dict | None) -> str:
  return "n/a" if times is None else f"{1e3 * times['wall_s']:.3g}"


def _short(key: str) -> str:
  return key.replace("steadax flat params", "flat").replace("steadax fused", "fuse").replace(
      "steadax", "per leaf").replace(", no shape limit", " (no limit)")


def _ratio_table(rows: list[dict], keys: tuple[str, ...], absolute: bool) -> list[str]:
  header = ["cell", "leaves", "largest leaf"]
  for key in keys:
    header += [f"{_short(key)}: {m}" for m in TABLE_METRICS]
  if absolute:
    header += ["optax first call CPU s", "optax train step ms", "optax update step ms"]
  body = []
  for row in rows:
    line = [row["cell"], f"{row['leaves']:,}", f"{row['largest_leaf']:,}"]
    for key in keys:
      line += [_fmt(row["ratios"][key][m]) for m in TABLE_METRICS]
    if absolute:
      line += [_first_call_cell(row["first_call"].get("optax")),
               *[_ms(row["steps"][kind].get("optax")) for kind in KINDS]]
    body.append(line)
  align = ["---"] + ["---:"] * (len(header) - 1)
  return ["| " + " | ".join(r) + " |" for r in [header, align, *body]]


def table(result: dict) -> list[str]:
  """Markdown: one row per cell with the goals' ratios and Optax's absolute figures; then the
  cells where the limit on leaves of one shape changed the layout, without it."""
  rows = result["rows"]
  lines = [f"AdamW; first call: CPU seconds of a fresh process (stopped after "
           f"{result['time_limit_s']:.0f} s); steps: median CPU time per step over "
           f"{result['rounds']} alternating rounds (Optax's columns: wall ms); ratios below 1 are "
           "faster. `fuse` and flat parameters are compared with the per-leaf path, per leaf with "
           "Optax.", "", *_ratio_table(rows, CHART_RATIOS[:3], absolute=True)]
  limited = [row for row in rows if FUSED_ALL in row["first_call"] or FLAT_ALL in row["first_call"]]
  if limited:
    lines += ["", "Where leaves of one shape stay leaves (more than `max_same_shape` of them), the "
              "same paths with every small leaf in a buffer (`max_same_shape=None`), against the "
              "per-leaf path:", "", *_ratio_table(limited, CHART_RATIOS[3:], absolute=False)]
  keys = tuple(f"{label}/optax" for label in (grid_models.OPTAX_AGAIN, grid_models.STEADAX_AGAIN)
               if any(label in row["first_call"] for row in rows))
  if keys:
    again = [row for row in rows if any(k.split("/")[0] in row["first_call"] for k in keys)]
    lines += ["", "The noise: each library's step compiled and measured a second time in the same "
              "rounds (the same program), against Optax's first:", "",
              *_ratio_table(again, keys, absolute=False)]
  return lines


def chart(path: str, result: dict, title: str) -> None:
  """One heat map per ratio (per leaf / Optax, fuse / per leaf, flat / per leaf): a row per cell,
  a column per metric, colour on a log scale centred on 1 (blue faster, red slower)."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.colors
  import matplotlib.pyplot as plt
  import numpy as np

  rows = result["rows"]
  fig, axes = plt.subplots(1, len(CHART_RATIOS), figsize=(4.2 * len(CHART_RATIOS) + 1.5,
                                                          0.28 * len(rows) + 1.8), squeeze=False)
  norm = matplotlib.colors.LogNorm(vmin=0.25, vmax=4.0)
  image = None
  for k, (ax, key) in enumerate(zip(axes[0], CHART_RATIOS)):
    values = np.array([[row["ratios"][key][m] if row["ratios"][key][m] is not None else np.nan
                        for m in CHART_METRICS] for row in rows], dtype=float)
    image = ax.imshow(np.clip(values, 0.25, 4.0), cmap="RdBu_r", norm=norm, aspect="auto")
    for i in range(values.shape[0]):
      for j in range(values.shape[1]):
        v = values[i, j]
        ax.text(j, i, "n/a" if math.isnan(v) else f"{v:.2f}", ha="center", va="center",
                fontsize=6, color="black" if math.isnan(v) or 0.5 < v < 2.0 else "white")
    ax.set_xticks(range(len(CHART_METRICS)))
    ax.set_xticklabels(CHART_METRICS, fontsize=7, rotation=20)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{r['cell']} ({r['leaves']:,} leaves, <= {r['largest_leaf']:,})"
                        for r in rows] if k == 0 else [], fontsize=6)
    ax.set_title(_short(key), fontsize=9)
  bar = fig.colorbar(image, ax=list(axes[0]), shrink=0.6, label="ratio (log scale)")
  bar.set_ticks([0.25, 0.5, 1.0, 2.0, 4.0], labels=["0.25", "0.5", "1", "2", "4"])
  bar.minorticks_off()
  fig.suptitle(title, fontsize=8)
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  fig.savefig(path, dpi=110, bbox_inches="tight")
  plt.close(fig)


def chart_path(stem_path: str) -> str:
  """The grid's chart beside the run's JSON: ``<machine>-<date>[-quick]-grid.png``."""
  return stem_path.removesuffix("-partial") + "-grid.png"


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(prog="python -m benchmarks.cases.grid", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--cells", default=None,
                      help='comma-separated cells, e.g. "mlp 50x16,nnx 8x16" (default: --size\'s)')
  parser.add_argument("--size", default="quick", choices=sorted(CELLS))
  parser.add_argument("--columns", default=None,
                      help='comma-separated columns (default: all), e.g. "optax,steadax,optax again,'
                           'steadax again" (a second copy of each library\'s step: the noise)')
  parser.add_argument("--json", default=None,
                      help="write the result here (after every cell) and its chart beside it")
  args = parser.parse_args(argv)
  sizes = {"full": harness.FULL, "quick": harness.QUICK, "smoke": harness.SMOKE}[args.size]
  cells = _cells(*[c.strip() for c in args.cells.split(",")]) if args.cells else None
  rows = []

  def show(row):
    rows.append(row)
    if args.json:  # after every cell: a long run stopped midway keeps what it measured
      with open(args.json, "w") as f:
        json.dump({"rows": rows}, f, indent=1)
    print(f"{row['cell']} (load {row['load_average']:.1f}): " + "; ".join(
        f"{_short(key)} " + " ".join(_fmt(row["ratios"][key][m]) for m in TABLE_METRICS)
        for key in (*CHART_RATIOS, f"{grid_models.OPTAX_AGAIN}/optax",
                    f"{grid_models.STEADAX_AGAIN}/optax")), flush=True)

  columns = tuple(c.strip() for c in args.columns.split(",")) if args.columns else None
  result = run(sizes, harness.Progress(enabled=False), cells, on_row=show, columns=columns)
  print("\n".join(table(result)))
  if args.json:
    from .. import report

    machine = report.machine()
    with open(args.json, "w") as f:
      json.dump({"machine": machine, "mode": args.size, "results": {"grid": result}}, f, indent=1)
    chart(args.json.removesuffix(".json").removesuffix("-grid") + "-grid.png", result,
          f"steadax vs Optax, shape grid ({args.size}): {machine['cpu']}, {machine['cores']} cores, "
          f"jax {machine['jax']}, {machine['date']}, {machine['git_commit']}")


if __name__ == "__main__":
  main()
