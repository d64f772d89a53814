"""steadax on an accelerator in one call (issue 33 §4): ``benchmarks/device.sh``.

On a machine with JAX (CUDA or another accelerator), Optax, Flax and Equinox installed and this
repository's ``src`` on ``PYTHONPATH`` (no network, no installs), five sections, each in a fresh
child process with its own time cap (the whole stays within ``Plan.total_s``, 7.5 minutes):

``adamw_bandwidth``
    AdamW's step on 1B float32 parameters (8 leaves of 125M) as a fraction of the memory
    bandwidth: a step moves 28 bytes per parameter (read params, grads, two moments; write params
    and moments), so bandwidth used = bytes / step time, against a copy kernel's best achieved
    bandwidth (the reference peak) and the device's nominal figure where known. steadax, Optax and
    the traffic floor (``harness.floor_one_buffer``) side by side (``cases/steps.py``).
``many_leaves``
    The 400-leaf case: AdamW per leaf, ``steadax.fuse`` and ``steadax.flat_params`` against Optax,
    the update step (``cases/steps.py``) and the whole training step (``cases/train.py``).
``stacked_matrix``
    The matrix optimizers on 8 and 32 stacked layers with dimension numbers, against steadax's
    AdamW and Optax's ``contrib.muon``: step and compile times (``benchmarks/stacked.py``).
``lm_layouts``
    The language model per layer against stacked and scanned (``cases/lm_scanned.py``).
``lm``
    The language-model case's GPU configuration for a few hundred steps (``cases/lm.py``).

Writes ``device.json`` (every figure, the machine, each section's status and wall time) and
``device.md`` (the tables) to the directory given, or ``$OUT``. A section that fails or reaches
its cap is recorded as such (with what it measured before) and the next one runs. ``--dry-run``
shrinks every size so the whole runs on a CPU in well under a minute (the test suite's smoke test).

  PYTHONPATH=src benchmarks/device.sh [OUT_DIR]
  PYTHONPATH=src benchmarks/device.sh --dry-run /tmp/device
  PYTHONPATH=src python -m benchmarks.device --sections lm [OUT_DIR]   # one section again
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECTIONS = ("adamw_bandwidth", "many_leaves", "stacked_matrix", "lm_layouts", "lm")
# Vendor datasheet HBM bandwidth, bytes/s, by a substring of ``device_kind``; the copy kernel's
# measured bandwidth is the reference, this a second column where the device is listed.
NOMINAL_BANDWIDTH = {"H200": 4.8e12, "H100": 3.35e12, "A100": 2.039e12}


@dataclasses.dataclass(frozen=True)
class Plan:
  """Every size and time cap of one mode."""

  mode: str
  total_s: float               # the parent's budget for all sections, child start-ups included
  caps: dict                   # section -> seconds (a child's whole time, start-up included)
  groups: tuple                # sections run together in one child process
  adamw_leaves: int
  adamw_leaf_size: int
  copy_elements: int           # float32 elements of the copy kernel's buffer
  bandwidth_rounds: int
  bandwidth_steps: int
  small_leaves: int
  leaves_rounds: int
  leaves_steps: int
  stacked_depths: tuple
  stacked_width: int
  stacked_rounds: int
  stacked_steps: int
  lm_config: str
  lm_overrides: dict
  layouts_overrides: dict
  layouts_optimizers: tuple | None  # None: AdamW and every matrix optimizer that takes stacks


GPU = Plan(
    mode="gpu", total_s=450.0,
    caps={"adamw_bandwidth": 60, "many_leaves": 70, "stacked_matrix": 120, "lm_layouts": 70,
          "lm": 200},
    groups=tuple((s,) for s in SECTIONS),
    adamw_leaves=8, adamw_leaf_size=125_000_000, copy_elements=512 * 2**20,
    bandwidth_rounds=7, bandwidth_steps=10,
    small_leaves=400, leaves_rounds=9, leaves_steps=20,
    stacked_depths=(8, 32), stacked_width=256, stacked_rounds=5, stacked_steps=10,
    lm_config="gpu", lm_overrides={"steps": 300, "optimizers": ("adamw", "muon", "soap")},
    layouts_overrides={"layers": 8, "steps": 100, "timing_rounds": 3},
    layouts_optimizers=None,
)

# The same code on toy sizes, all sections in one child process (one start-up).
DRY = Plan(
    mode="dry", total_s=240.0,
    caps={"adamw_bandwidth": 40, "many_leaves": 40, "stacked_matrix": 60, "lm_layouts": 40,
          "lm": 40},
    groups=(SECTIONS,),
    adamw_leaves=2, adamw_leaf_size=4096, copy_elements=2**16,
    bandwidth_rounds=2, bandwidth_steps=2,
    small_leaves=6, leaves_rounds=2, leaves_steps=2,
    stacked_depths=(2,), stacked_width=4, stacked_rounds=2, stacked_steps=2,
    lm_config="smoke",
    lm_overrides={"steps": 2, "eval_every": 2, "val_windows": 4, "batch": 2, "context": 8,
                  "d_model": 8, "optimizers": ("adamw",), "timing_steps": 1},
    layouts_overrides={"layers": 2, "steps": 2, "eval_every": 2, "val_windows": 4, "batch": 2,
                       "context": 8, "d_model": 8, "timing_steps": 1},
    layouts_optimizers=("muon",),
)


# -- the sections (in the child) -------------------------------------------------------------------

def _sizes(rounds: int, steps: int, **fields):
  from benchmarks import harness
  return dataclasses.replace(harness.SMOKE, rounds=rounds, steps=steps, **fields)


def _copy_bandwidth(elements: int, rounds: int) -> dict:
  """A copy kernel's bandwidth (read and write every byte once), best and median of ``rounds``."""
  import statistics

  import jax
  import jax.numpy as jnp

  copy = jax.jit(lambda x: x + jnp.float32(1), donate_argnums=0)
  x = jax.block_until_ready(copy(jnp.zeros(elements, jnp.float32)))
  per_round = []
  for _ in range(rounds):
    t0 = time.perf_counter()
    for _ in range(10):
      x = copy(x)
    jax.block_until_ready(x)
    per_round.append(2 * 4 * elements * 10 / (time.perf_counter() - t0))
  return {"bytes": 4 * elements, "best_bytes_per_s": max(per_round),
          "median_bytes_per_s": statistics.median(per_round), "rounds_bytes_per_s": per_round}


def adamw_bandwidth(plan: Plan, deadline: float, record: Callable) -> dict:
  import jax
  import jax.numpy as jnp
  import optax

  import steadax
  from benchmarks import harness
  from benchmarks.cases import steps

  copy = _copy_bandwidth(plan.copy_elements, plan.bandwidth_rounds)
  record({"copy": copy})
  kind = jax.devices()[0].device_kind
  nominal = next((v for k, v in NOMINAL_BANDWIDTH.items() if k in kind), None)

  def make_params():
    # Made on the device: a host array of 4 GB per contender would cost more than the step.
    make = jax.jit(lambda: {f"w{i}": jnp.ones((plan.adamw_leaf_size,), jnp.float32)
                            for i in range(plan.adamw_leaves)})
    return make()

  columns = harness.transformations(optax.adamw(1e-3), steadax.adamw(1e-3))
  row = steps.compare(f"adamw, {plan.adamw_leaves} x {plan.adamw_leaf_size:,}", make_params, columns,
                      _sizes(plan.bandwidth_rounds, plan.bandwidth_steps),
                      harness.Progress(enabled=False))
  moved = row["floor_bytes_per_step"]
  fractions = {label: {"bytes_per_s": moved / t, "of_copy": moved / t / copy["best_bytes_per_s"],
                       "of_nominal": None if nominal is None else moved / t / nominal}
               for label, t in row["median_s"].items() if t is not None}
  return {"device_kind": kind, "nominal_bytes_per_s": nominal, "copy": copy, "row": row,
          "bytes_per_step": moved, "bandwidth": fractions}


def many_leaves(plan: Plan, deadline: float, record: Callable) -> dict:
  import optax

  import steadax
  from benchmarks import harness
  from benchmarks.cases import steps, train

  sizes = _sizes(plan.leaves_rounds, plan.leaves_steps, small_leaves=plan.small_leaves)
  quiet = harness.Progress(enabled=False)
  _, make_params = harness.small_params(plan.small_leaves)
  columns = harness.transformations(optax.adamw(1e-3), steadax.adamw(1e-3), fused=True, flat=True)
  update = steps.compare(f"{plan.small_leaves} small: adamw (update)", make_params, columns, sizes,
                         quiet)
  record({"update": update})
  contenders = harness.build_contenders(columns, make_params, quiet, "train",
                                        make=train.train_contender)
  timed = harness.time_rounds(contenders, sizes, quiet, "train")
  times = {label: timed[label]["median_s"] for label in timed}
  training = {"case": f"{plan.small_leaves} small: adamw (training step)", "median_s": times,
              "ratios": {f"{label}/optax": times[label] / times["optax"]
                         for label in times if label != "optax"},
              "rounds_s": {label: timed[label]["rounds_s"] for label in timed}}
  return {"leaves": plan.small_leaves, "update": update, "train": training}


def stacked_matrix(plan: Plan, deadline: float, record: Callable) -> dict:
  from benchmarks import stacked

  rows: list = []

  def on_row(row):
    rows.append(row)
    record({"rows": rows})

  return stacked.measure(plan.stacked_depths, plan.stacked_width,
                         _sizes(plan.stacked_rounds, plan.stacked_steps), deadline=deadline,
                         on_row=on_row, warm_up=plan.mode != "dry")


def _lm_config(name: str, overrides: dict):
  from benchmarks.cases import lm
  return dataclasses.replace(lm.CONFIGS[name], **overrides)


def lm_layouts(plan: Plan, deadline: float, record: Callable) -> dict:
  from benchmarks.cases import lm_scanned

  config = _lm_config(plan.lm_config, plan.layouts_overrides)
  names = None if plan.layouts_optimizers is None else list(plan.layouts_optimizers)
  return lm_scanned.compare_layouts(config, names, deadline=deadline,
                                   on_row=lambda rows: record({"rows": rows}),
                                   warm_up=plan.mode != "dry")


def lm(plan: Plan, deadline: float, record: Callable) -> dict:
  from benchmarks.cases import lm as lm_case

  return lm_case.measure(_lm_config(plan.lm_config, plan.lm_overrides),
                         on_optimizer=lambda rows, optax_rows: record({"rows": rows, "optax": optax_rows}))


RUNNERS = {"adamw_bandwidth": adamw_bandwidth, "many_leaves": many_leaves,
           "stacked_matrix": stacked_matrix, "lm_layouts": lm_layouts, "lm": lm}


# -- the tables (rendered in the child, which has the modules loaded) --------------------------------

def _gbs(x: float | None) -> str:
  return "n/a" if x is None else f"{x / 1e9:,.0f}"


def _fraction(x: float | None) -> str:
  return "n/a" if x is None else f"{x:.2f}"


def _table(header: list[str], body: list[list[str]]) -> list[str]:
  align = ["---"] + ["---:"] * (len(header) - 1)
  return ["| " + " | ".join(r) + " |" for r in [header, align, *body]]


def bandwidth_table(result: dict) -> list[str]:
  copy = result["copy"]
  body = [[label, f"{1e3 * result['row']['median_s'][label]:.3g}", _gbs(f["bytes_per_s"]),
           _fraction(f["of_copy"]), _fraction(f["of_nominal"])]
          for label, f in result["bandwidth"].items()]
  return [f"{result['row']['case']} on {result['device_kind']}: {result['bytes_per_step'] / 1e9:.1f} "
          f"GB moved per step (read params, grads, moments; write params, moments). Copy kernel "
          f"({copy['bytes'] / 2**30:.2f} GiB, read + write): best {_gbs(copy['best_bytes_per_s'])} "
          f"GB/s, median {_gbs(copy['median_bytes_per_s'])} GB/s; nominal "
          f"{_gbs(result['nominal_bytes_per_s'])} GB/s.", "",
          *_table(["column", "step ms", "GB/s", "of copy", "of nominal"], body)]


def leaves_table(result: dict) -> list[str]:
  lines = []
  for key in ("update", "train"):
    row = result[key]
    labels = [label for label in row["median_s"] if label != "optax" and "floor" not in label]
    body = [[label, "n/a" if row["median_s"][label] is None else f"{1e3 * row['median_s'][label]:.3g}",
             _fraction(row["ratios"].get(f"{label}/optax"))] for label in labels]
    lines += [f"{row['case']}: Optax {1e3 * row['median_s']['optax']:.3g} ms.", "",
              *_table(["column", "step ms", "/ optax"], body), ""]
  return lines[:-1]


def _stacked_table(result: dict) -> list[str]:
  from benchmarks import stacked
  return stacked.table(result)


def _layouts_table(result: dict) -> list[str]:
  from benchmarks.cases import lm_scanned
  return lm_scanned.table(result)


def _lm_table(result: dict) -> list[str]:
  from benchmarks import report
  return report.lm_table(result)


TABLES = {"adamw_bandwidth": bandwidth_table, "many_leaves": leaves_table,
          "stacked_matrix": _stacked_table, "lm_layouts": _layouts_table, "lm": _lm_table}


def _partial_table(name: str, partial: dict) -> list[str]:
  """What a section measured before it stopped (the stacked rows; otherwise nothing to draw)."""
  if name == "stacked_matrix" and partial.get("rows"):
    from benchmarks import stacked
    rows = partial["rows"]
    return stacked.table({"rows": rows, "width": rows[0]["width"], "left_out": {},
                          "compile_growth": stacked.compile_growth(rows)})
  return []


def _device() -> dict:
  import jax

  from benchmarks import report

  device = jax.devices()[0]
  stats = getattr(device, "memory_stats", lambda: None)() or {}
  return {**report.machine(), "device_kind": device.device_kind, "platform": device.platform,
          "device_count": jax.device_count(), "device_memory_bytes": stats.get("bytes_limit")}


def child(sections: list[str], plan: Plan, part: str, cap: float) -> None:
  """Runs ``sections`` in this process, rewriting ``part`` (JSON) after every figure; the parent
  stops the process after ``cap`` seconds."""
  start = time.perf_counter()
  if plan.mode == "dry":
    from benchmarks.cases import lm as lm_case
    lm_case.set_cpu_flag()  # before the backend starts
  import jax

  # Optax's code and the language model are not written for strict promotion or rank errors.
  jax.config.update("jax_numpy_dtype_promotion", "standard")
  jax.config.update("jax_numpy_rank_promotion", "allow")
  out: dict = {"machine": _device(), "sections": {}}

  def write():
    with open(part + ".tmp", "w") as f:
      json.dump(out, f, indent=1, default=float)
    os.replace(part + ".tmp", part)

  for name in sections:
    t0 = time.perf_counter()
    entry = out["sections"][name] = {"status": "running", "partial": {}}
    write()

    def record(partial, entry=entry, name=name):
      entry["partial"].update(partial)
      entry["markdown"] = _partial_table(name, entry["partial"])
      write()

    try:
      # No new item (depth, optimizer) starts in the last quarter of the section's time.
      left = min(plan.caps[name], cap - (t0 - start))
      result = RUNNERS[name](plan, t0 + 0.75 * left, record)
      out["sections"][name] = {"status": "ok", "result": result, "markdown": TABLES[name](result)}
    except Exception as error:  # the next section still runs
      out["sections"][name] = {"status": f"failed: {type(error).__name__}: {error}",
                               "traceback": traceback.format_exc(), "partial": entry["partial"],
                               "markdown": _partial_table(name, entry["partial"])}
    out["sections"][name]["wall_s"] = time.perf_counter() - t0
    write()


# -- the parent ------------------------------------------------------------------------------------

class Stopped(Exception):
  """SIGTERM reached the parent (``timeout`` in device.sh): the child is stopped, results written."""


def _stop(signum, frame):
  raise Stopped()

def _run_group(group: tuple, plan: Plan, cap: float, out_dir: str, index: int) -> tuple[dict, dict]:
  """One child process for ``group``; its sections (with a status for those it did not finish)."""
  part = os.path.join(out_dir, f".device-part-{index}.json")
  if os.path.exists(part):
    os.remove(part)
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(
      p for p in (os.path.join(ROOT, "src"), ROOT, os.environ.get("PYTHONPATH", "")) if p))
  command = [sys.executable, "-m", "benchmarks.device", "--child", ",".join(group), "--part", part,
             "--cap", str(cap)]
  if plan.mode == "dry":
    command.append("--dry-run")
  t0 = time.perf_counter()
  process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
  try:
    log, _ = process.communicate(timeout=cap)
    ended = None if process.returncode == 0 else f"the child exited with {process.returncode}"
  except (subprocess.TimeoutExpired, Stopped) as why:
    os.killpg(process.pid, 9)  # its own session: nothing else would stop it
    log, _ = process.communicate()
    ended = (f"stopped at its cap of {cap:.0f} s" if isinstance(why, subprocess.TimeoutExpired)
             else "stopped by SIGTERM (device.sh's 8-minute backstop)")
  wall = time.perf_counter() - t0
  found: dict = {"machine": {}, "sections": {}}
  if os.path.exists(part):
    with open(part) as f:
      found = json.load(f)
    os.remove(part)
  sections = found["sections"]
  for name in group:
    entry = sections.setdefault(name, {"status": "not started"})
    if entry["status"] in ("running", "not started") and ended is not None:
      entry["status"] = f"{entry['status']}: {ended}"
      entry["log_tail"] = (log or "")[-3000:]
  print(f"[device] {', '.join(group)}: {wall:.0f} s, "
        + "; ".join(f"{n} {sections[n]['status'].splitlines()[0][:200]}" for n in group), flush=True)
  return found["machine"], sections


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(prog="python -m benchmarks.device", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("out_dir", nargs="?", default=None, help="where to write (default: $OUT)")
  parser.add_argument("--dry-run", action="store_true", help="toy sizes, on any backend (CPU)")
  parser.add_argument("--sections", default=None, help=f"comma-separated, from {', '.join(SECTIONS)}")
  parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
  parser.add_argument("--part", default=None, help=argparse.SUPPRESS)
  parser.add_argument("--cap", type=float, default=None, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  plan = DRY if args.dry_run else GPU
  if args.child:
    child(args.child.split(","), plan, args.part, args.cap or plan.total_s)
    return {}
  out_dir = args.out_dir or os.environ.get("OUT")
  if not out_dir:
    parser.error("give an output directory or set $OUT")
  os.makedirs(out_dir, exist_ok=True)
  wanted = SECTIONS if args.sections is None else tuple(args.sections.split(","))
  unknown = [s for s in wanted if s not in SECTIONS]
  if unknown:
    parser.error(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
  t0 = time.perf_counter()
  signal.signal(signal.SIGTERM, _stop)
  result: dict = {"mode": plan.mode, "plan": dataclasses.asdict(plan), "machine": {}, "sections": {}}
  for index, group in enumerate(plan.groups):
    group = tuple(s for s in group if s in wanted)
    if not group:
      continue
    left = plan.total_s - (time.perf_counter() - t0)
    cap = min(sum(plan.caps[s] for s in group), left)
    stopped = any("SIGTERM" in e["status"] for e in result["sections"].values())
    if cap < 20 or stopped:
      why = "the run was stopped by SIGTERM" if stopped else f"{left:.0f} s of the budget left"
      for name in group:
        result["sections"][name] = {"status": f"not run: {why}"}
      continue
    machine, sections = _run_group(group, plan, cap, out_dir, index)
    result["machine"] = result["machine"] or machine
    result["sections"].update(sections)
    result["wall_s"] = time.perf_counter() - t0
    write(out_dir, result)  # after every group: a run stopped from outside keeps what it measured
  result["wall_s"] = time.perf_counter() - t0
  write(out_dir, result)
  print(f"[device] {result['wall_s']:.0f} s; wrote {os.path.join(out_dir, 'device.json')} and "
        f"device.md", flush=True)
  return result


def markdown(result: dict) -> list[str]:
  """device.md: the machine, then each section's status, wall time and table."""
  m = result["machine"]
  lines = [f"# steadax on {m.get('device_kind', 'an unknown device')} ({result['mode']} run)", "",
           f"{m.get('device_count', '?')} x {m.get('device_kind', '?')} ({m.get('platform', '?')}), "
           f"host {m.get('cpu', '?')} ({m.get('cores', '?')} cores); jax {m.get('jax', '?')}, "
           f"jaxlib {m.get('jaxlib', '?')}, Optax {m.get('optax', '?')}, steadax at "
           f"{m.get('git_commit', '?')}; {m.get('date', '?')} {m.get('time_utc', '')} UTC; "
           f"{result.get('wall_s', 0):.0f} s in all."]
  for name in SECTIONS:
    if name not in result["sections"]:
      continue
    entry = result["sections"][name]
    wall = f", {entry['wall_s']:.0f} s" if "wall_s" in entry else ""
    lines += ["", f"## {name} ({entry['status'].splitlines()[0]}{wall})", ""]
    lines += entry.get("markdown") or ["(nothing measured)"]
  return lines


def write(out_dir: str, result: dict) -> None:
  with open(os.path.join(out_dir, "device.json"), "w") as f:
    json.dump(result, f, indent=1, default=float)
  with open(os.path.join(out_dir, "device.md"), "w") as f:
    f.write("\n".join(markdown(result)) + "\n")


if __name__ == "__main__":
  done = main()
  # The files are written either way; a section that did not finish makes the exit status 1.
  sys.exit(0 if all(e["status"] == "ok" for e in done.get("sections", {}).values()) else 1)
