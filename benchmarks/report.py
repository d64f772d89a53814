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
  labels = _union(r["median_s"] for r in rows)
  ratio_keys = _union(r["ratios"] for r in rows)
  header = ["case", *[f"{label} ms" for label in labels], *ratio_keys]

  def ratio_cell(row, key):
    if key in row["ratios"]:
      return _ratio(row["ratios"][key])
    # A column the library cannot fill is n/a; a floor the case does not measure stays blank.
    return "n/a" if row["median_s"].get(key.split("/")[0], 0.0) is None else ""

  body = [[r["case"], *[_ms(r["median_s"][l]) if l in r["median_s"] else "" for l in labels],
           *[ratio_cell(r, k) for k in ratio_keys]] for r in rows]
  return _markdown(header, body)


def first_call_table(rows: list[dict]) -> list[str]:
  labels = _union(r["first_call"] for r in rows)
  header = ["leaves", *[f"{label} s (trace)" for label in labels],
            *[f"{label}/optax" for label in labels if label != "optax"]]
  body = []
  for r in rows:
    calls = r["first_call"]
    cells = [f"{r['leaves']:,}"]
    cells += ["n/a" if calls[l] is None else f"{calls[l]['total_s']:.2f} ({calls[l]['trace_s']:.2f})"
              for l in labels]
    cells += [_ratio(None if calls[l] is None else calls[l]["total_s"] / calls["optax"]["total_s"])
              for l in labels if l != "optax"]
    body.append(cells)
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
  numbers = {**result["numbers"], **result["ratios"]}
  body = [[key, f"{value:.4g}" if isinstance(value, float) else str(value)]
          for key, value in numbers.items()]
  return _markdown(["benchmarks/sweep_case.py", "value"], body)


TABLES = {
    "steps": lambda result: steps_table(result["rows"]),
    "first_call": lambda result: first_call_table(result["rows"]),
    "memory": memory_table,
    "lbfgs": lbfgs_table,
    "sweep": sweep_table,
}


def tables(results: dict) -> str:
  """Markdown: the step cases in one table, then one table per other case."""
  step_rows = [row for r in results.values() if r["kind"] == "steps" for row in r["rows"]]
  parts = []
  if step_rows:
    parts.append("Step time (median ms per step; ratios: steadax time / Optax time, below 1 is "
                 "faster, and steadax time / floor, 1 is the floor):\n\n"
                 + "\n".join(steps_table(step_rows)))
  for name, result in results.items():
    if result["kind"] != "steps":
      title = {"first_call": "First call (trace + lower + compile + one step), seconds:",
               "memory": "Memory:", "lbfgs": "L-BFGS:",
               "sweep": "Learning-rate sweep (8 sequential Optax runs vs one vmapped steadax.sweep):"}[result["kind"]]
      parts.append(title + "\n\n" + "\n".join(TABLES[result["kind"]](result)))
  return "\n\n".join(parts)


# -- files ---------------------------------------------------------------------------------------

def write_json(path: str, payload: dict) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    json.dump(payload, f, indent=1)
    f.write("\n")


def _ratio_rows(results: dict) -> list[tuple[str, dict]]:
  rows = [(row["case"], row["ratios"]) for r in results.values() if r["kind"] == "steps"
          for row in r["rows"]]
  rows += [(f"lbfgs: {r['dim']}-d Rosenbrock", r["ratios"]) for r in results.values()
           if r["kind"] == "lbfgs"]
  rows += [(f"sweep: {r['numbers']['sweep_size']} learning rates", r["ratios"])
           for r in results.values() if r["kind"] == "sweep"]
  return rows


def chart(path: str, results: dict, title: str) -> bool:
  """Ratios per case (a line at 1.0) and first-call time against the leaf count; False: nothing."""
  ratio_rows = _ratio_rows(results)
  panels = []
  for name, suffix in (("vs Optax", "/optax"), ("vs floor", "/floor")):
    rows = [(case, {k: v for k, v in ratios.items() if suffix in k})
            for case, ratios in ratio_rows]
    rows = [(case, ratios) for case, ratios in rows if ratios]
    if rows:
      panels.append((name, rows))
  first_call = [row for r in results.values() if r["kind"] == "first_call" for row in r["rows"]]
  count = len(panels) + bool(first_call)
  if not count:
    return False
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, axes = plt.subplots(1, count, figsize=(5.5 * count, 0.35 * len(ratio_rows) + 3),
                           squeeze=False)
  axes = list(axes[0])
  for ax, (name, rows) in zip(axes, panels):
    keys = _union(ratios for _, ratios in rows)
    height = 0.8 / len(keys)
    for j, key in enumerate(keys):
      ax.barh([i + j * height for i in range(len(rows))],
              [ratios.get(key, 0.0) for _, ratios in rows], height=height, label=key)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_yticks([i + 0.4 - height / 2 for i in range(len(rows))])
    ax.set_yticklabels([case for case, _ in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time ratio (below 1: faster)")
    ax.set_title(f"time, {name}")
    ax.legend(fontsize=7)
  if first_call:
    ax = axes[-1]
    for label in _union(r["first_call"] for r in first_call):
      points = [(r["leaves"], r["first_call"][label]["total_s"]) for r in first_call
                if r["first_call"].get(label) is not None]
      ax.plot(*zip(*points), marker="o", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("leaves (64..4096 float32 each)")
    ax.set_ylabel("first call, s")
    ax.set_title("AdamW step: trace + compile")
    ax.legend(fontsize=7)
  fig.suptitle(title, fontsize=7, wrap=True)
  fig.tight_layout()
  os.makedirs(os.path.dirname(path), exist_ok=True)
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return True


def readme_block(m: dict, mode: str, table_text: str, chart_path: str | None) -> str:
  lines = [README_START, "",
           f"Written by `make bench` ({mode} mode) on {describe(m)}. Absolute times hold for that "
           "machine only; the ratios are the point.", "", table_text]
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
