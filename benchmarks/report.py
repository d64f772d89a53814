"""What a run leaves behind: the machine's description, the JSON, the tables, the chart, README."""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import subprocess
import sys

import jax
import jaxlib
import optax

import steadax

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
README_START = "<!-- bench:start -->"
README_END = "<!-- bench:end -->"


# -- the machine ---------------------------------------------------------------------------------

def _cpu_model() -> str:
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or platform.machine() or "unknown cpu"


def _ram_bytes() -> int | None:
  try:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
  except (ValueError, OSError, AttributeError):
    return None


def _git_commit() -> str:
  def git(*args):
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
  try:
    commit = git("rev-parse", "--short=12", "HEAD")
    dirty = git("status", "--porcelain", "--untracked-files=no")
  except (OSError, subprocess.CalledProcessError):
    return "unknown"
  return commit + ("+uncommitted changes" if dirty else "")


def machine() -> dict:
  cpu = _cpu_model()
  cores = os.cpu_count() or 1
  name = re.sub(r"\((r|tm)\)|\bcpu\b|\bprocessor\b|\d+-core|@.*$", " ", cpu, flags=re.IGNORECASE)
  slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
  now = datetime.datetime.now(datetime.timezone.utc)
  return {
      "slug": f"{slug or 'cpu'}-{cores}c",
      "cpu": cpu,
      "cores": cores,
      "ram_bytes": _ram_bytes(),
      "load_average_at_start": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
      "os": platform.platform(),
      "backend": jax.default_backend(),
      "python": sys.version.split()[0],
      "jax": jax.__version__,
      "jaxlib": jaxlib.__version__,
      "optax": optax.__version__,
      "steadax": steadax.__version__ if hasattr(steadax, "__version__") else "unknown",
      "date": now.strftime("%Y-%m-%d"),
      "time_utc": now.strftime("%H:%M:%S"),
      "git_commit": _git_commit(),
  }


def describe(m: dict) -> str:
  ram = f", {m['ram_bytes'] / 2**30:.0f} GiB RAM" if m["ram_bytes"] else ""
  load = (f", load average {m['load_average_at_start']:.1f} at start"
          if m["load_average_at_start"] is not None else "")
  return (f"{m['cpu']} ({m['cores']} cores{ram}{load}), {m['os']}, {m['backend']} backend; "
          f"Python {m['python']}, jax {m['jax']}, jaxlib {m['jaxlib']}, Optax {m['optax']}, "
          f"steadax {m['steadax']} at {m['git_commit']}; {m['date']}")


# -- tables --------------------------------------------------------------------------------------

def _ms(seconds) -> str:
  return "n/a" if seconds is None else f"{1e3 * seconds:.3g}"


def _ratio(x) -> str:
  return "n/a" if x is None else f"{x:.2f}"


def _markdown(header: list[str], rows: list[list[str]], right_from: int = 1) -> list[str]:
  align = ["---" if i < right_from else "---:" for i in range(len(header))]
  return ["| " + " | ".join(r) + " |" for r in [header, align, *rows]]


def _union(dicts) -> list[str]:
  keys = []
  for d in dicts:
    keys += [k for k in d if k not in keys]
  return keys


def steps_table(rows: list[dict]) -> list[str]:
  """One row per case: the ratios first (against Optax, then against the floors), then the times."""
  labels = _union(r["median_s"] for r in rows)
  ratio_keys = _union(r["ratios"] for r in rows)
  ratio_keys = ([k for k in ratio_keys if k.endswith("/optax")]
                + [k for k in ratio_keys if not k.endswith("/optax")])
  header = ["case", *ratio_keys, *[f"{label} ms" for label in labels]]

  def ratio_cell(row, key):
    if key in row["ratios"]:
      return _ratio(row["ratios"][key])
    # A column the library cannot fill is n/a; a floor the case does not measure stays blank.
    return "n/a" if row["median_s"].get(key.split("/")[0], 0.0) is None else ""

  body = [[r["case"], *[ratio_cell(r, k) for k in ratio_keys],
           *[_ms(r["median_s"][l]) if l in r["median_s"] else "" for l in labels]] for r in rows]
  return _markdown(header, body)


def first_call_table(rows: list[dict]) -> list[str]:
  labels = _union(r["first_call"] for r in rows)

  def seconds(call):
    if call is None:
      return "n/a"
    if call["total_s"] is None:
      return f"> {call['stopped_after_s']:.0f} (stopped)"
    return f"{call['total_s']:.2f}"

  def ratio(call, optax_call):
    if call is None or call["total_s"] is None or optax_call["total_s"] is None:
      return "n/a"
    return _ratio(call["total_s"] / optax_call["total_s"])

  def peak(call):
    if call is None or call["total_s"] is None or call["peak_rss_bytes"] is None:
      return "n/a"
    return f"{call['peak_rss_bytes'] / 2**20:.0f}"

  header = ["leaves", *[f"{label} s" for label in labels],
            *[f"{label}/optax" for label in labels if label != "optax"],
            *[f"{label} peak MiB" for label in labels]]
  body = [[f"{r['leaves']:,}", *[seconds(r["first_call"][l]) for l in labels],
           *[ratio(r["first_call"][l], r["first_call"]["optax"]) for l in labels if l != "optax"],
           *[peak(r["first_call"][l]) for l in labels]] for r in rows]
  return _markdown(header, body)


def memory_table(result: dict) -> list[str]:
  labels = _union(r["memory"] for r in result["rows"])
  header = ["optimizer", *[f"{l} state B/param" for l in labels],
            *[f"{l} peak MiB" for l in labels]]
  body = []
  for r in result["rows"]:
    m = r["memory"]
    body.append([r["optimizer"],
                 *["n/a" if m[l] is None else f"{m[l]['state_bytes_per_param']:.2f}" for l in labels],
                 *["n/a" if m[l] is None else f"{m[l]['peak_bytes'] / 2**20:.1f}" for l in labels]])
  return [f"{result['parameters']:,} float32 parameters (8 layers: matrix + bias); peak is XLA's "
          "memory analysis of the donated step (params, grads, state, temporaries).", "",
          *_markdown(header, body)]


def lbfgs_table(result: dict) -> list[str]:
  header = ["solver", "time ms", "iterations", "final value", "max abs grad", "compile s"]
  body = [[r["solver"], _ms(r["median_s"]), str(r["iterations"]), f"{r['value']:.2e}",
           f"{r['grad_max']:.1e}" + ("" if r["converged"] else " (not converged)"),
           "" if r["compile_s"] is None else f"{r['compile_s']:.2f}"] for r in result["rows"]]
  ratios = ", ".join(f"{k} {v:.2f}" for k, v in result["ratios"].items())
  return [f"{result['dim']}-d Rosenbrock to max abs grad <= {result['tolerance']:g}: {ratios}.",
          "", *_markdown(header, body)]


def sweep_table(result: dict) -> list[str]:
  n = result["numbers"]
  body = [
      ["time of the whole sweep, s", f"{n['optax_sequential_total_s']:.2f}",
       f"{n['steadax_sweep_total_s']:.2f}", _ratio(result["ratios"]["steadax/optax (total)"])],
      ["XLA compilations, first round", str(n["optax_sequential_compilations_first_round"]),
       str(n["steadax_sweep_compilations_first_round"]), ""],
      ["XLA compilations, a later round", str(n["optax_sequential_compilations_per_round"]),
       str(n["steadax_sweep_compilations_per_round"]), ""],
      ["compiled step programs", str(n["optax_sequential_step_programs"]),
       str(n["steadax_sweep_step_programs"]), ""],
      [f"one step of all {n['sweep_size']} configurations, ms", _ms(n["optax_sequential_step_s"]),
       _ms(n["steadax_sweep_step_s"]), _ratio(result["ratios"]["steadax/optax (step)"])],
  ]
  return [f"{n['sweep_size']} learning rates, {n['steps']} AdamW steps each on a small MLP "
          f"(benchmarks/sweep_case.py, median of {n['rounds']} round(s)); final losses agree to "
          f"{n['final_loss_max_rel_diff']:.1e} (relative).", "",
          *_markdown(["", f"{n['sweep_size']} sequential Optax runs", "one vmapped steadax.sweep",
                      "steadax/optax"], body)]


def import_time_table(result: dict) -> list[str]:
  n = result["numbers"]
  body = [[what, _ms(n[f"optax_{key}_s"]), _ms(n[f"steadax_{key}_s"]),
           f"{n[f'{key}_difference_s'] * 1e3:+.1f}", _ratio(n[f"{key}_ratio"])]
          for what, key in (("import", "import"), ("import + adam(1e-3) + init", "first_use"))]
  return [f"After `import jax`, fresh processes, median of {n['runs']} each "
          "(benchmarks/import_time.py).", "",
          *_markdown(["", "optax, ms", "steadax, ms", "difference, ms", "steadax/optax"], body)]


def trace_time_table(result: dict) -> list[str]:
  trees = list(dict.fromkeys(r["tree"] for r in result["rows"]))
  by_optimizer: dict = {}
  for r in result["rows"]:
    by_optimizer.setdefault(r["optimizer"], {})[r["tree"]] = r["ratio"]
  body = [[name, *[_ratio(ratios[t]) for t in trees]] for name, ratios in by_optimizer.items()]
  return ["steadax's trace CPU time over Optax's for the update on about 200 leaves "
          "(benchmarks/trace_time.py: repeated = 200 vectors of 7 lengths, transformer = 28 blocks "
          "of 7 leaves, distinct = 200 lengths; smallest of the rounds).", "",
          *_markdown(["optimizer", *trees], body)]


def _grid_table(result: dict) -> list[str]:
  from benchmarks.cases import grid  # the case owns its table (report loads before cases)
  return grid.table(result)


def _matrix_depth_table(result: dict) -> list[str]:
  from benchmarks.cases import matrix_depth  # the case owns its table (report loads before cases)
  return matrix_depth.table(result)


TITLES = {
    "first_call": "First call of the AdamW training step (loss, gradient, update, apply: trace + "
                  "lower + compile + one step), seconds, one "
                  "measurement per point in a fresh process, and that process's peak memory:",
    "memory": "Memory:",
    "lbfgs": "L-BFGS:",
    "sweep": "Learning-rate sweep:",
    "import_time": "Import time:",
    "trace_time": "Trace time of the update:",
    "matrix_depth": "Matrix optimizers, update compile time against depth (issue 22):",
    "grid": "The shape grid (issue 24): AdamW on five model structures, leaf counts and sizes:",
}
TABLES = {
    "first_call": lambda result: first_call_table(result["rows"]),
    "memory": memory_table,
    "lbfgs": lbfgs_table,
    "sweep": sweep_table,
    "import_time": import_time_table,
    "trace_time": trace_time_table,
    "matrix_depth": lambda result: _matrix_depth_table(result),
    "grid": _grid_table,
}


def tables(results: dict) -> str:
  """Markdown: the step cases in one table, then one table per other case."""
  step_rows = [row for r in results.values() if r["kind"] == "steps" for row in r["rows"]]
  parts = []
  if step_rows:
    parts.append("Step time (ratios: steadax time / Optax time, below 1 is faster, and steadax "
                 "time / floor time, 1 is the floor; times: median ms per step):\n\n"
                 + "\n".join(steps_table(step_rows)))
  for result in results.values():
    if result["kind"] != "steps":
      parts.append(TITLES[result["kind"]] + "\n\n" + "\n".join(TABLES[result["kind"]](result)))
  return "\n\n".join(parts)


# -- files ---------------------------------------------------------------------------------------

def write_json(path: str, payload: dict) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    json.dump(payload, f, indent=1)
    f.write("\n")


def _ratio_rows(results: dict) -> list[tuple[str, dict]]:
  """(label, {"<column>/<reference>": ratio}) for every case that has ratios, in run order."""
  rows = []
  for r in results.values():
    if r["kind"] == "steps":
      rows += [(row["case"], row["ratios"]) for row in r["rows"]]
    elif r["kind"] == "lbfgs":
      rows.append((f"lbfgs: {r['dim']}-d Rosenbrock", {"steadax/optax": r["ratios"]["steadax/optax"]}))
    elif r["kind"] == "sweep":
      for what in ("total", "step"):
        rows.append((f"sweep: {r['numbers']['sweep_size']} learning rates, {what}",
                     {"steadax/optax": r["ratios"][f"steadax/optax ({what})"]}))
  return rows


def _bars(ax, rows: list[tuple[str, dict]], keys: list[str]) -> None:
  height = 0.8 / len(keys)
  for j, key in enumerate(keys):
    ax.barh([i - 0.4 + (j + 0.5) * height for i in range(len(rows))],
            [ratios.get(key, 0.0) for _, ratios in rows], height=height, label=key)
  ax.axvline(1.0, color="black", linewidth=1)
  ax.set_yticks(range(len(rows)))
  ax.set_yticklabels([case for case, _ in rows], fontsize=7)
  ax.set_ylim(len(rows) - 0.5, -0.5)
  ax.legend(fontsize=7, loc="lower right")


def chart(path: str, results: dict, title: str) -> bool:
  """Time ratios per case against Optax and against the floor (a line at 1.0), and first-call time
  against the leaf count. Returns False, writing nothing, when no case has any of them."""
  rows = _ratio_rows(results)
  keys = _union(ratios for _, ratios in rows)
  optax_keys = [k for k in keys if k.endswith("/optax")]
  floor_keys = [k for k in keys if "/floor" in k]
  first_call = [row for r in results.values() if r["kind"] == "first_call" for row in r["rows"]]
  panels = bool(optax_keys) + bool(floor_keys) + bool(first_call)
  if not panels:
    return False
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  import matplotlib.ticker

  fig, axes = plt.subplots(1, panels, figsize=(4.5 * panels + 2.5, 0.3 * len(rows) + 2.5),
                           squeeze=False)
  axes = list(axes[0])
  if optax_keys:
    ax = axes.pop(0)
    _bars(ax, rows, optax_keys)
    ax.set_title("time / Optax time (below 1: faster)", fontsize=9)
  if floor_keys:
    ax = axes.pop(0)
    _bars(ax, rows, floor_keys)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    if optax_keys:
      ax.set_yticklabels([])
    ax.set_title("time / floor time (1: at the floor)", fontsize=9)
  if first_call:
    ax = axes.pop(0)
    for label in _union(r["first_call"] for r in first_call):
      points = [(r["leaves"], r["first_call"][label]["total_s"]) for r in first_call
                if r["first_call"].get(label) and r["first_call"][label]["total_s"] is not None]
      if points:
        ax.plot(*zip(*points), marker="o", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks([r["leaves"] for r in first_call])
    for axis in (ax.xaxis, ax.yaxis):
      axis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.yaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax.set_xlabel("leaves (64..4096 float32 each)", fontsize=8)
    ax.set_ylabel("seconds", fontsize=8)
    ax.set_title("AdamW training step: first call", fontsize=9)
    ax.legend(fontsize=7)
  fig.suptitle(title, fontsize=8)
  fig.tight_layout()
  os.makedirs(os.path.dirname(path), exist_ok=True)
  fig.savefig(path, dpi=110, bbox_inches="tight")
  plt.close(fig)
  return True


def readme_block(m: dict, mode: str, wall_s: float, table_text: str, chart_path: str | None
                 ) -> str:
  lines = [README_START, "",
           f"Written by `make bench` ({mode} mode, {wall_s / 60:.1f} minutes) on {describe(m)}. "
           "Absolute times hold for that machine only; the ratios are the point.", "", table_text]
  if chart_path:
    rel = os.path.relpath(chart_path, ROOT).replace(os.sep, "/")
    lines += ["", f"![benchmark chart]({rel})"]
  return "\n".join(lines + ["", README_END])


def update_readme(block: str, readme: str = os.path.join(ROOT, "README.md")) -> bool:
  """Replaces the text between the markers; False (README untouched) when they are missing."""
  with open(readme) as f:
    text = f.read()
  start, end = text.find(README_START), text.find(README_END)
  if start < 0 or end < start:
    return False
  with open(readme, "w") as f:
    f.write(text[:start] + block + text[end + len(README_END):])
  return True


# -- the language-model case (benchmarks/cases/lm.py) ---------------------------------------------

def _lm_steps(entry: dict) -> str:
  if entry["steps_to_target"] is None:
    return "not reached"
  return f"{entry['steps_to_target']} (lr {entry['steps_to_target_lr']:g})"


def lm_table(result: dict) -> list[str]:
  """Markdown: the setting, one row per optimizer, then the Optax twins' agreement."""
  c, d, s = result["config"], result["data"], result["summary"]
  met = ", ".join(s["goal_met_by"]) or "none"
  header = ["optimizer", "learning rates", "best lr", "best final val loss",
            "steps to AdamW's best (lr)", "/ AdamW", "<= 0.75x", "step ms", "state KiB",
            "state / params"]
  param_bytes = 4 * result["parameters"]
  body = []
  for name, row in result["rows"].items():
    e = s["optimizers"][name]
    body.append([name + (f" ({row['note']})" if row["note"] else ""),
                 ", ".join(f"{lr:g}" for lr in row["learning_rates"]), f"{e['best_lr']:g}",
                 f"{e['best_final_val_loss']:.3f}", _lm_steps(e),
                 "n/a" if e["steps_ratio"] is None else f"{e['steps_ratio']:.2f}",
                 "yes" if e["meets_goal"] else "no", _ms(row["step_s"]),
                 f"{row['state_bytes'] / 1024:.0f}", f"{row['state_bytes'] / param_bytes:.2f}"])
  lines = [f"{result['parameters']:,}-parameter byte-level transformer ({c['layers']} layers, "
           f"d_model {c['d_model']}, {c['heads']} heads, context {c['context']}) on Python "
           f"{d['python']}'s standard library: {d['train_bytes']:,} training bytes "
           f"({d['train_files']} files), {d['val_bytes']:,} held out ({d['val_files']} files); "
           f"{c['steps']} steps of {c['batch']} windows, validation loss (nats per byte, "
           f"{c['val_windows']} held-out windows) every {c['eval_every']} steps; one "
           "`steadax.sweep` program per optimizer. AdamW's best final validation loss: "
           f"{s['target']:.3f}. Matrix optimizers reaching it in at most 0.75x AdamW's steps: "
           f"{met}. Step ms: one configuration's whole training step.", "",
           *_markdown(header, body, right_from=2)]
  if result["optax"]:
    twin_body = []
    for name, o in result["optax"].items():
      best = s["optimizers"][name]["best_lr"]
      lrs = o["learning_rates"]
      twin_body.append([
          name, f"{o['val_abs_diff'][lrs.index(best)]:.1e}",
          ", ".join(f"{lr:g}: {d:.1e}" for lr, d in zip(lrs, o["val_abs_diff"])),
          ", ".join(f"{lr:g}: {'never' if a is None else a}" for lr, a in zip(lrs, o["apart_from"])),
          f"{o['state_bytes'] / 1024:.0f}", f"{result['rows'][name]['state_bytes'] / 1024:.0f}"])
    lines += ["", "Optax's optimizers on the same sweeps (`optax.inject_hyperparams`, vmapped over "
              "the learning rate): the largest difference of the validation losses from steadax's, "
              "and the first step whose training losses differ by more than 1e-4 (relative). The "
              "runs agree to float32 rounding until a learning rate at the edge of stability "
              "amplifies the last bits.", "",
              *_markdown(["optimizer", "val loss diff at the best lr", "val loss diff per lr",
                          "train losses > 1e-4 apart from step", "Optax state KiB",
                          "steadax state KiB"], twin_body)]
  return lines


def lm_chart(path: str, result: dict, title: str) -> None:
  """Validation loss of each optimizer's best learning rate against steps and against wall time
  (steps x one configuration's measured step time), AdamW's best final loss as a line."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  s = result["summary"]
  steps = s["eval_steps"]
  fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
  lowest = s["target"]
  for name, row in result["rows"].items():
    e = s["optimizers"][name]
    curve = row["val_loss"][row["learning_rates"].index(e["best_lr"])]
    lowest = min(lowest, min(curve))
    style = {"linewidth": 2.0 if name in s["goal_met_by"] or name == "adamw" else 1.2,
             "linestyle": "-" if name == "adamw" or name in ("muon", "soap", "shampoo", "psgd_kron")
             else "--", "label": f"{name} (lr {e['best_lr']:g})"}
    axes[0].plot(steps, curve, **style)
    axes[1].plot([step * row["step_s"] for step in steps], curve, **style)
  for ax in axes:
    ax.axhline(s["target"], color="black", linewidth=0.8, linestyle=":")
    ax.set_ylim(lowest - 0.05, s["target"] + 1.0)
    ax.grid(alpha=0.3)
  axes[0].set_xlabel("steps", fontsize=9)
  axes[0].set_ylabel("validation loss (nats per byte)", fontsize=9)
  axes[0].set_title("validation loss against steps (dotted: AdamW's best final)", fontsize=9)
  axes[1].set_xlabel("seconds (steps x one configuration's step time)", fontsize=9)
  axes[1].set_title("validation loss against wall time", fontsize=9)
  axes[1].legend(fontsize=7, loc="upper right")
  fig.suptitle(title, fontsize=8)
  fig.tight_layout()
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  fig.savefig(path, dpi=110, bbox_inches="tight")
  plt.close(fig)


TITLES["lm"] = "Proof on a language model (issue 22 §3):"
TABLES["lm"] = lm_table


def _stats_table(result: dict) -> list[str]:
  from benchmarks.cases import stats  # the case owns its table (report loads before cases)
  return stats.table(result)


TITLES["stats"] = "Training statistics (issue 34 §4), with_stats(tx) against tx:"
TABLES["stats"] = _stats_table


def _recipes_table(result: dict) -> list[str]:
  from benchmarks.cases import recipes  # the case owns its table (report loads before cases)
  return recipes.table(result)


TITLES["recipes"] = "Compile time of common recipes (update step, many small leaves), steadax against Optax:"
TABLES["recipes"] = _recipes_table


def lm_chart_path(stem_path: str) -> str:
  """The lm case's chart beside the run's JSON: ``<machine>-<date>[-quick]-lm.png`` (it holds that
  case alone, so a partial run names it the same)."""
  return stem_path.removesuffix("-partial") + "-lm.png"
