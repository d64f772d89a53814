"""The Muon family's chart for docs/choosing.md from ``benchmarks.cases.muon_family`` results.

Two panels: validation loss against steps at each optimizer's best learning rate, and the largest
attention logit of each step at the largest learning rate (where Muon's logits explode and QK-clip
holds them). Several result files (runs of different optimizers on the same configuration) are
merged; an optimizer in more than one keeps its first.

  python -m benchmarks.muon_family_chart docs/assets/muon_family.png family.json more.json
"""

from __future__ import annotations

import json
import sys


def merged(paths: list[str]) -> tuple[list[int], dict]:
  """(evaluation steps, {optimizer: row}) over the result files."""
  steps, rows = None, {}
  for path in paths:
    with open(path) as f:
      result = json.load(f)
    steps = steps or result["eval_steps"]
    if result["eval_steps"] != steps:
      raise SystemExit(f"{path}: other evaluation steps ({result['config']['name']} configuration?)")
    for name, row in result["rows"].items():
      rows.setdefault(name, row)
  return steps, rows


def chart(out: str, paths: list[str]) -> None:
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  steps, rows = merged(paths)
  fig, (loss_ax, logit_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
  for name, row in rows.items():
    best = row["learning_rates"].index(row["best_lr"])
    loss_ax.plot(steps[1:], row["runs"][best]["val_loss"][1:], label=f"{name} (lr {row['best_lr']:g})")
    top = max(range(len(row["learning_rates"])), key=lambda i: row["learning_rates"][i])
    logit_ax.plot(row["runs"][top]["max_logit"], label=name)
  loss_ax.set(xlabel="step", ylabel="validation loss (nats per byte)", title="at each one's best rate")
  top_lr = max(next(iter(rows.values()))["learning_rates"])
  logit_ax.set(xlabel="step", ylabel="largest attention logit", yscale="log",
               title=f"at the largest rate ({top_lr:g})")
  for ax in (loss_ax, logit_ax):
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(out, dpi=110)


if __name__ == "__main__":
  chart(sys.argv[1], sys.argv[2:])
