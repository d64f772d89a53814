"""Issue 34 §1: the Muon family on the language model of ``lm.py``, and Gram Newton-Schulz by shape.

Two measurements:

* ``lm_family(factories, ...)``: optimizer factories ``make(lr, dims) -> transformation`` train the
  model of ``lm.py`` (same parameters, batches and held-out windows, via its functions; ``lm.py``
  is not edited) for each of a few learning rates, one configuration at a time (a jitted
  ``lax.scan`` per ``eval_every`` steps). Reported per optimizer: the validation curve per
  learning rate, the best final validation loss, the steps to reach the reference's (Muon's) best
  final validation loss, the time of one training step (median of alternating rounds), the state's
  bytes, and the largest attention logit seen (per step, over heads and layers). A factory marked
  ``max_logits`` receives the per-head maximum logits of the step as ``update``'s ``max_logits=``
  (QK-clip): the forward pass here is ``lm.forward``'s maths with the logits' maxima returned beside
  the loss (``forward_with_max_logits``, checked against ``lm.loss_fn`` when the case starts).
* ``gram_timings(shapes, ...)``: one orthogonalization (5 steps, float32) of a matrix of each shape
  by the standard iteration (``contrib._muon.newton_schulz``) and by Gram Newton-Schulz (jitted,
  median of alternating rounds), their ratio, and how far apart the results are.

  python -m benchmarks.cases.muon_family --config quick --json muon_family.json
  python -m benchmarks.cases.muon_family --gram 256x1024,512x4096,1024x1024
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import steadax
from steadax.contrib import _gram_newton_schulz, _muon

from . import lm


@dataclasses.dataclass(frozen=True)
class Factory:
  """One row: ``make(lr, dims)`` builds the transformation; ``max_logits``: its update takes them."""

  learning_rates: tuple
  make: Callable[[Any, Any], Any]
  max_logits: bool = False
  note: str = ""


def qk_spec(params: dict) -> Any:
  """QK-clip's spec on ``lm.py``'s parameters: each block's query and key, heads fused head-major
  on their output axis (``(d, heads * head_dim)``)."""
  def spec(path, leaf):
    name = getattr(path[-1], "key", None)
    in_block = any(getattr(p, "key", None) == "blocks" for p in path)
    if in_block and name in ("query", "key"):
      return steadax.contrib.QKClipSpec(name, head_axis=1)
    return None
  return jax.tree_util.tree_map_with_path(spec, params)


def logits_tree(params: dict, per_layer: jax.Array) -> dict:
  """``max_logits`` for QK-clip: each block's ``(heads,)`` maxima at its node, None elsewhere."""
  return {k: ([per_layer[i] for i in range(len(v))] if k == "blocks" else
              jax.tree_util.tree_map(lambda _: None, v))
          for k, v in params.items()}


TAU = 20.0  # the quick and full models' logits stay far below Kimi K2's 100

FACTORIES = {
    "muon": Factory((0.02, 0.04, 0.08), lambda lr, dims: steadax.contrib.muon(
        lr, adam_learning_rate=lm.MUON_ADAM_SHARE * lr, muon_weight_dimension_numbers=dims)),
    "muon_polar_express": Factory((0.02, 0.04, 0.08), lambda lr, dims: steadax.contrib.muon(
        lr, ns_coeffs=steadax.contrib.polar_express_coefficients(5), ns_steps=5, eps=1e-7,
        adam_learning_rate=lm.MUON_ADAM_SHARE * lr, muon_weight_dimension_numbers=dims),
        note="the paper's published schedule (l = 1e-3), 5 steps"),
    "muon_polar_express_preset": Factory((0.02, 0.04, 0.08), lambda lr, dims: steadax.contrib.muon(
        lr, ns_coeffs="polar_express", eps=1e-7, adam_learning_rate=lm.MUON_ADAM_SHARE * lr,
        muon_weight_dimension_numbers=dims), note="ns_coeffs=\"polar_express\": lower = 2e-3, 5 steps"),
    "muon_gram": Factory((0.02, 0.04, 0.08), lambda lr, dims: steadax.contrib.muon(
        lr, ns_algorithm="gram", adam_learning_rate=lm.MUON_ADAM_SHARE * lr, muon_weight_dimension_numbers=dims),
        note="ns_algorithm=\"gram\""),
    "normuon": Factory((0.02, 0.04, 0.08), lambda lr, dims: steadax.contrib.normuon(
        lr, adam_learning_rate=lm.MUON_ADAM_SHARE * lr, muon_weight_dimension_numbers=dims)),
    "muon_qk_clip": Factory((0.02, 0.04, 0.08), lambda lr, dims: steadax.chain(
        steadax.contrib.muon(lr, adam_learning_rate=lm.MUON_ADAM_SHARE * lr,
                             muon_weight_dimension_numbers=dims),
        steadax.contrib.qk_clip(qk_spec, tau=TAU)), max_logits=True, note=f"tau = {TAU:g}"),
}


# -- the model with its logits -------------------------------------------------------------------

def _block_with_max_logits(x: jax.Array, block: dict, heads: int) -> tuple[jax.Array, jax.Array]:
  """``lm._block`` and the per-head maximum of its attention logits (over batch and positions)."""
  batch, length, d = x.shape
  causal = jnp.tril(jnp.ones((length, length), bool))
  h = lm._layer_norm(x, block["norm1"])
  q, k, v = (jnp.reshape(h @ block[name], (batch, length, heads, d // heads))
             for name in ("query", "key", "value"))
  scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.float32(np.sqrt(d // heads))
  max_logits = jnp.max(jnp.where(causal, scores, -jnp.inf), axis=(0, 2, 3))
  attention = jax.nn.softmax(jnp.where(causal, scores, np.float32(-1e9)), axis=-1)
  mixed = jnp.reshape(jnp.einsum("bhqk,bkhd->bqhd", attention, v), (batch, length, d))
  x = x + mixed @ block["out"]
  return x + jax.nn.gelu(lm._layer_norm(x, block["norm2"]) @ block["up"]) @ block["down"], max_logits


def forward_with_max_logits(params: dict, tokens: jax.Array, heads: int) -> tuple[jax.Array, jax.Array]:
  """The mean next-byte loss of ``lm.loss_fn`` and the ``(layers, heads)`` maximum logits."""
  inputs = tokens[:, :-1]
  x = params["embed"][inputs] + params["position"][:inputs.shape[1]]
  maxima = []
  for block in params["blocks"]:
    x, m = _block_with_max_logits(x, block, heads)
    maxima.append(m)
  logits = lm._layer_norm(x, params["final_norm"]) @ params["head"]
  log_probs = jax.nn.log_softmax(logits)
  loss = -jnp.mean(jnp.take_along_axis(log_probs, tokens[:, 1:, None], axis=-1))
  return loss, jnp.stack(maxima)


# -- training ------------------------------------------------------------------------------------

def _step(tx: Any, heads: int, with_logits: bool) -> Callable:
  def step(params, state, tokens):
    (loss, maxima), grads = jax.value_and_grad(forward_with_max_logits, has_aux=True)(params, tokens, heads)
    extra = {"max_logits": logits_tree(params, maxima)} if with_logits else {}
    updates, state = tx.update(grads, state, params, **extra)
    return steadax.apply_updates(params, updates), state, loss, jnp.max(maxima)
  return step


def train(tx: Any, with_logits: bool, config: lm.Config, data: dict) -> dict:
  """One configuration: validation losses every ``eval_every`` steps, training losses and the
  largest logit of every step, the chunk's compile time and the training time."""
  step = _step(tx, config.heads, with_logits)

  def chunk(params, state, train, offsets):
    def body(carry, offs):
      params, state, loss, top = step(*carry, lm.windows(train, offs, config.context))
      return (params, state), (loss, top)
    (params, state), (losses, tops) = jax.lax.scan(body, (params, state), offsets)
    return params, state, losses, tops

  params = jax.tree_util.tree_map(jnp.copy, data["params"])
  state = jax.jit(tx.init)(params)
  offsets = data["offsets"].reshape(-1, config.eval_every, config.batch)
  evaluate = jax.jit(lambda p: lm.loss_fn(p, data["val"], config.heads))
  t0 = time.perf_counter()
  chunk = jax.jit(chunk, donate_argnums=(0, 1)).lower(params, state, data["train"], offsets[0]).compile()
  compile_s = time.perf_counter() - t0
  val, train_losses, tops, train_s = [float(evaluate(params))], [], [], 0.0
  for offs in offsets:
    t0 = time.perf_counter()
    params, state, losses, top = jax.block_until_ready(chunk(params, state, data["train"], offs))
    train_s += time.perf_counter() - t0
    train_losses.extend(np.asarray(losses).tolist())
    tops.extend(np.asarray(top).tolist())
    val.append(float(evaluate(params)))
  return {"val_loss": val, "train_loss": train_losses, "max_logit": tops, "compile_s": compile_s,
          "train_s": train_s}


def step_timer(tx: Any, with_logits: bool, config: lm.Config, data: dict) -> Callable[[int], float]:
  """A jitted, donated training step of one configuration: ``run(steps) -> seconds per step``."""
  step = jax.jit(_step(tx, config.heads, with_logits), donate_argnums=(0, 1))
  params = jax.tree_util.tree_map(jnp.copy, data["params"])
  state = jax.jit(tx.init)(params)
  tokens = lm.windows(data["train"], jnp.asarray(data["offsets"][0]), config.context)
  params, state, _, _ = jax.block_until_ready(step(params, state, tokens))

  def run(steps):
    nonlocal params, state
    t0 = time.perf_counter()
    for _ in range(steps):
      params, state, loss, _ = step(params, state, tokens)
    jax.block_until_ready(loss)
    return (time.perf_counter() - t0) / steps
  return run


def lm_family(config: lm.Config, factories: dict[str, Factory] | None = None,
              reference: str = "muon") -> dict:
  """Trains every factory at each of its learning rates; the table's numbers per optimizer."""
  factories = factories or FACTORIES
  text = lm.corpus()
  params = lm.init_params(config)
  data = {"train": jnp.asarray(text.train.astype(np.int32)), "val": lm.val_windows(config, text.val),
          "offsets": lm.batch_offsets(config, len(text.train)), "params": params}
  tokens = lm.windows(data["train"], jnp.asarray(data["offsets"][0]), config.context)
  same = float(forward_with_max_logits(params, tokens, config.heads)[0] - lm.loss_fn(params, tokens, config.heads))
  assert abs(same) < 1e-5, f"forward_with_max_logits differs from lm.loss_fn by {same}"
  dims = lm.muon_dimensions(steadax, params)
  eval_steps = list(range(0, config.steps + 1, config.eval_every))
  rows: dict = {}
  for name, factory in factories.items():
    runs = [train(factory.make(lr, dims), factory.max_logits, config, data) for lr in factory.learning_rates]
    finals = [r["val_loss"][-1] for r in runs]
    best = int(np.nanargmin(finals))
    state = jax.eval_shape(factory.make(factory.learning_rates[best], dims).init, params)
    rows[name] = {"learning_rates": list(factory.learning_rates), "note": factory.note, "runs": runs,
                  "best_lr": factory.learning_rates[best], "best_final_val_loss": finals[best],
                  "max_logit_peak": max(max(r["max_logit"]) for r in runs),
                  "max_logit_peak_best_lr": max(runs[best]["max_logit"]),
                  "state_bytes": lm.state_bytes(state)}
  target = rows[reference]["best_final_val_loss"]
  for row in rows.values():
    reach = [s for r in row["runs"] if (s := lm.steps_to(r["val_loss"], eval_steps, target)) is not None]
    row["steps_to_reference"] = min(reach) if reach else None
  # One step of each at its best learning rate, in alternating rounds.
  timers = {name: step_timer(factories[name].make(row["best_lr"], dims), factories[name].max_logits, config, data)
            for name, row in rows.items()}
  times: dict = {name: [] for name in timers}
  for r in range(config.timing_rounds):
    for name in (list(timers) if r % 2 == 0 else list(timers)[::-1]):
      times[name].append(timers[name](config.timing_steps))
  for name, row in rows.items():
    row["step_s"] = statistics.median(times[name])
  return {"config": dataclasses.asdict(config), "reference": reference, "target": target,
          "eval_steps": eval_steps, "rows": rows}


def lm_table(result: dict) -> list[str]:
  ref = result["rows"][result["reference"]]
  lines = [f"| optimizer | best lr | best final val loss | steps to {result['reference']}'s "
           f"({result['target']:.4f}) | step (ms) | step vs {result['reference']} | state (KiB) | "
           "max logit (peak, best lr) |", "|---|---|---|---|---|---|---|---|"]
  for name, row in result["rows"].items():
    steps = row["steps_to_reference"]
    lines.append(f"| {name} | {row['best_lr']:g} | {row['best_final_val_loss']:.4f} | "
                 f"{'-' if steps is None else steps} | {1e3 * row['step_s']:.2f} | "
                 f"{row['step_s'] / ref['step_s']:.2f}x | {row['state_bytes'] / 1024:.1f} | "
                 f"{row['max_logit_peak_best_lr']:.2f} |")
  return lines


# -- Gram Newton-Schulz by shape -----------------------------------------------------------------

def gram_timings(shapes: list[tuple[int, ...]], steps: int = 5, rounds: int = 5,
                 coeffs: Any = (3.4445, -4.7750, 2.0315)) -> list[dict]:
  """Standard against Gram Newton-Schulz (float32, default restarts) per shape: seconds per call
  (median of alternating rounds), the ratio, the FLOP model's ratio and the relative difference."""
  coeffs = jnp.asarray(coeffs, jnp.float32)
  eps = jnp.asarray(1e-7, jnp.float32)
  fns = {"standard": jax.jit(lambda x: _muon.newton_schulz(x, coeffs, steps, "frobenius", eps)),
         "gram": jax.jit(lambda x: _gram_newton_schulz.gram_newton_schulz(x, coeffs, steps, "frobenius", eps))}
  out = []
  for shape in shapes:
    x = jax.random.normal(jax.random.key(0), shape, jnp.float32)
    results = {k: jax.block_until_ready(f(x)) for k, f in fns.items()}
    times: dict = {k: [] for k in fns}
    for r in range(rounds):
      for k in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
        t0 = time.perf_counter()
        jax.block_until_ready(fns[k](x))
        times[k].append(time.perf_counter() - t0)
    s, g = (np.asarray(results[k], np.float64) for k in ("standard", "gram"))
    standard_s, gram_s = statistics.median(times["standard"]), statistics.median(times["gram"])
    n, m = shape
    out.append({"shape": list(shape), "standard_s": standard_s, "gram_s": gram_s,
                "ratio": gram_s / standard_s,
                "flop_ratio": (_gram_newton_schulz.gram_flops((n, m), steps)
                               / _gram_newton_schulz.standard_flops((n, m), steps)),
                "rel_diff": float(np.linalg.norm(g - s) / np.linalg.norm(s)),
                "max_abs_diff": float(np.max(np.abs(g - s)))})
  return out


def gram_table(rows: list[dict]) -> list[str]:
  lines = ["| shape | standard (ms) | Gram (ms) | Gram / standard | FLOP model | rel. difference |",
           "|---|---|---|---|---|---|"]
  for r in rows:
    lines.append(f"| {r['shape'][0]}x{r['shape'][1]} | {1e3 * r['standard_s']:.1f} | {1e3 * r['gram_s']:.1f} | "
                 f"{r['ratio']:.2f} | {r['flop_ratio']:.2f} | {r['rel_diff']:.1e} |")
  return lines


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(prog="python -m benchmarks.cases.muon_family", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--config", default="quick", choices=list(lm.CONFIGS))
  parser.add_argument("--steps", type=int, default=None, help="override the config's steps")
  parser.add_argument("--optimizers", default=None, help="comma-separated, the reference first")
  parser.add_argument("--gram", default=None, help="shapes, e.g. 256x1024,1024x1024: the Gram timing only")
  parser.add_argument("--rounds", type=int, default=5, help="timed rounds of the Gram timing")
  parser.add_argument("--json", default=None, help="write the result here")
  args = parser.parse_args(argv)
  lm.set_cpu_flag()
  jax.config.update("jax_numpy_dtype_promotion", "standard")
  jax.config.update("jax_numpy_rank_promotion", "allow")
  if args.gram:
    shapes = [tuple(int(n) for n in s.split("x")) for s in args.gram.split(",")]
    result: Any = gram_timings(shapes, rounds=args.rounds)
    print("\n".join(gram_table(result)))
  else:
    config = lm.CONFIGS[args.config]
    if args.steps:
      config = dataclasses.replace(config, steps=args.steps)
    names = args.optimizers.split(",") if args.optimizers else list(FACTORIES)
    result = lm_family(config, {n: FACTORIES[n] for n in names}, reference=names[0])
    print("\n".join(lm_table(result)))
  if args.json:
    with open(args.json, "w") as f:
      json.dump(result, f, indent=1)


if __name__ == "__main__":
  main()
