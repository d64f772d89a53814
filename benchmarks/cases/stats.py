"""Training statistics overhead (issue 34 §4): ``with_stats(tx)`` against ``tx`` on 400 small leaves.

The updates are the same bit for bit; what is timed is the cost of keeping the statistics. Each
pair (the optimizer, and the optimizer under ``with_stats``) is compiled once and timed in the
alternating rounds of ``harness.time_rounds`` (all columns in one process, the order reversed
every other round); the figure is the median over rounds of the per-round ratio of a pair, so
drift of a loaded machine cancels. The load average is recorded before and after.
"""

from __future__ import annotations

import os
import statistics

import steadax

from .. import harness


def _clip_adamw():
  return steadax.chain(steadax.clip_by_global_norm(1.0), steadax.adamw(1e-3))


# name -> (the optimizer, the optimizer with statistics)
PAIRS = {
    "adamw": (lambda: steadax.adamw(1e-3), lambda: steadax.with_stats(steadax.adamw(1e-3))),
    "clip+adamw": (_clip_adamw, lambda: steadax.with_stats(_clip_adamw())),
    "adamw, norms=True": (lambda: steadax.adamw(1e-3),
                          lambda: steadax.with_stats(steadax.adamw(1e-3), norms=True)),
}


def run(sizes: harness.Sizes, progress: harness.Progress) -> dict:
  _, make_params = harness.small_params(sizes.small_leaves)
  columns = {}
  for name, (plain, with_stats) in PAIRS.items():
    columns[f"{name}: plain"] = (steadax, plain())
    columns[f"{name}: with_stats"] = (steadax, with_stats())
  progress.start("stats", len(columns) + sizes.rounds)
  load_before = os.getloadavg()
  contenders = harness.build_contenders(columns, make_params, progress, "stats")
  timed = harness.time_rounds(contenders, sizes, progress, "stats")
  load_after = os.getloadavg()
  rows = []
  for name in PAIRS:
    plain, stats = timed[f"{name}: plain"], timed[f"{name}: with_stats"]
    per_round = [s / p for s, p in zip(stats["rounds_s"], plain["rounds_s"])]
    rows.append({
        "case": f"{sizes.small_leaves} small: {name}",
        "plain_ms": plain["median_s"] * 1e3,
        "with_stats_ms": stats["median_s"] * 1e3,
        "ratio": statistics.median(per_round),
        "rounds_ratio": per_round,
    })
  return {"kind": "stats", "rows": rows, "load_before": load_before, "load_after": load_after}


def table(result: dict) -> list[str]:
  """Markdown rows: each pair's times and the median per-round ratio."""
  lines = ["| case | plain ms | with_stats ms | with_stats / plain (median of rounds) |",
           "|---|---|---|---|"]
  for row in result["rows"]:
    lines.append(f"| {row['case']} | {row['plain_ms']:.3f} | {row['with_stats_ms']:.3f} | "
                 f"{row['ratio']:.3f} |")
  before, after = result["load_before"][0], result["load_after"][0]
  lines.append(f"\nLoad average (1 min) {before:.2f} before, {after:.2f} after.")
  return lines
