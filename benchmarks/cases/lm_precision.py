"""Issue 34 §3 and §5 on the language model of ``lm.py`` (same model, data and batches).

Two experiments, each a few hundred steps of AdamW on one configuration of ``lm.CONFIGS``:

* ``averaging`` (§3): does a constant learning rate with parameter averaging reach the validation
  loss of a warmup-stable-decay (WSD) cooldown? For each peak learning rate, one run with a WSD
  schedule (linear warmup, constant, then a cooldown over the last ``cooldown`` fraction, linear or
  ``1-sqrt`` to 0, Hägele et al. 2024) and one run with the same warmup then a constant learning
  rate, wrapped as ``ema_params(swa_params(adamw, start_step), decay)``: that run gives the raw
  constant-rate parameters, their EMA and their SWA average (from the step the cooldown would
  start) at once. The WSD schedule is ``steadax.warmup_stable_decay_schedule``.
* ``bf16`` (§5): AdamW on float32 parameters, and on bfloat16 parameters (no float32 copy) applied
  with round-to-nearest, with ``stochastic_rounding()`` and with ``kahan_summation()`` as the last
  stage. Only the parameters' storage differs: the model computes in float32 from them, the moments
  are float32 (``mu_dtype``/``nu_dtype``), and the learning rate follows the same WSD schedule
  (its cooldown is where round-to-nearest stalls: the steps shrink below half the spacing).

Reported: the validation loss every ``eval_every`` steps and at the end, per run; the training wall
time of each run (compilation apart).

  python -m benchmarks.cases.lm_precision --config quick --steps 400 --json lm_precision.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import steadax

from . import lm


def wsd_schedule(peak: float, steps: int, warmup: int, cooldown: int, shape: str = "linear") -> Callable:
  """Warmup-stable-decay (``steadax.warmup_stable_decay_schedule``): linear warmup from 0 to
  ``peak`` over ``warmup`` steps, ``peak`` until ``steps - cooldown``, then a cooldown to 0 at
  ``steps``, ``linear`` or ``1-sqrt`` (Hägele et al. 2024)."""
  return steadax.warmup_stable_decay_schedule(peak, total_steps=steps, warmup_steps=warmup,
                                              decay_steps=cooldown, decay_shape=shape)


def constant_schedule(peak: float, warmup: int) -> Callable:
  """The same linear warmup, then ``peak`` for ever."""
  return lambda count: peak * jnp.minimum(jnp.asarray(count, jnp.float32) / max(warmup, 1), 1.0)


@dataclasses.dataclass(frozen=True)
class Run:
  """One training run: a transformation, the parameters' dtype, and what to evaluate.

  ``evaluate(params, state) -> {name: params to evaluate}``: the raw parameters, or averages read
  from the state.
  """

  name: str
  tx: Any
  param_dtype: Any = jnp.float32
  evaluate: Callable[[Any, Any], dict] | None = None


def _loss(params, tokens, heads):
  # Stored in any dtype, computed in float32: only the parameters' storage differs between runs.
  wide = jax.tree_util.tree_map(lambda p: p.astype(jnp.float32), params)
  return lm.loss_fn(wide, tokens, heads)


def train(run: Run, config: lm.Config, data: dict) -> dict:
  """Trains ``run`` for ``config.steps`` steps (chunks of ``eval_every`` under one ``lax.scan``)
  and evaluates its parameters after every chunk."""
  evaluate = run.evaluate or (lambda params, state: {run.name: params})
  tx = run.tx

  def chunk(params, state, offsets):
    def body(carry, offs):
      params, state = carry
      tokens = lm.windows(data["train"], offs, config.context)
      loss, grads = jax.value_and_grad(_loss)(params, tokens, config.heads)
      updates, state = tx.update(grads, state, params)
      return (steadax.apply_updates(params, updates), state), loss
    (params, state), losses = jax.lax.scan(body, (params, state), offsets)
    return params, state, losses

  @jax.jit
  def validate(params, state):
    return {name: _loss(p, data["val"], config.heads) for name, p in evaluate(params, state).items()}

  params = jax.tree_util.tree_map(lambda p: p.astype(run.param_dtype), data["params"])
  state = jax.jit(tx.init)(params)
  offsets = data["offsets"].reshape(-1, config.eval_every, config.batch)
  t0 = time.perf_counter()
  chunk = jax.jit(chunk).lower(params, state, offsets[0]).compile()
  compile_s = time.perf_counter() - t0
  curves: dict = {name: [float(v)] for name, v in validate(params, state).items()}
  train_s = 0.0
  for offs in offsets:
    t0 = time.perf_counter()
    params, state, _ = jax.block_until_ready(chunk(params, state, offs))
    train_s += time.perf_counter() - t0
    for name, value in validate(params, state).items():
      curves[name].append(float(value))
  return {"val_loss": curves, "train_s": train_s, "compile_s": compile_s}


def averaging_runs(lr: float, config: lm.Config, warmup: int, cooldown: int, ema_decay: float) -> list[Run]:
  """WSD (linear and 1-sqrt cooldowns) against a constant rate with its EMA and SWA averages."""
  steps = config.steps
  adamw = lambda schedule: steadax.adamw(schedule, weight_decay=1e-4)  # noqa: E731
  averaged = steadax.ema_params(steadax.swa_params(adamw(constant_schedule(lr, warmup)),
                                                   start_step=steps - cooldown), ema_decay)

  def read(params, state):
    # The outer wrapper holds the EMA, its inner one the SWA average.
    return {"constant": params, "constant+ema": state.average, "constant+swa": state.inner_state.average}

  return [Run("wsd_linear", adamw(wsd_schedule(lr, steps, warmup, cooldown))),
          Run("wsd_1-sqrt", adamw(wsd_schedule(lr, steps, warmup, cooldown, "1-sqrt"))),
          Run("constant", averaged, evaluate=read)]


def bf16_runs(lr: float, config: lm.Config, warmup: int, cooldown: int) -> list[Run]:
  """AdamW on float32 parameters and on bfloat16 ones: round-to-nearest, stochastic, Kahan."""
  schedule = wsd_schedule(lr, config.steps, warmup, cooldown)
  adamw = steadax.adamw(schedule, weight_decay=1e-4, mu_dtype=jnp.float32, nu_dtype=jnp.float32)
  return [Run("float32", adamw),
          Run("bf16_nearest", adamw, jnp.bfloat16),
          Run("bf16_stochastic", steadax.chain(adamw, steadax.stochastic_rounding()), jnp.bfloat16),
          Run("bf16_kahan", steadax.chain(adamw, steadax.kahan_summation()), jnp.bfloat16)]


def measure(config: lm.Config, experiments: tuple[str, ...], learning_rates: tuple[float, ...],
            warmup_fraction: float = 0.05, cooldown_fraction: float = 0.2,
            ema_decay: float | None = None, seed: int = 0) -> dict:
  text = lm.corpus()
  data = {"train": jnp.asarray(text.train.astype(np.int32)), "val": lm.val_windows(config, text.val),
          "offsets": lm.batch_offsets(config, len(text.train), seed),
          "params": lm.init_params(config, seed)}
  warmup = max(1, round(warmup_fraction * config.steps))
  cooldown = max(1, round(cooldown_fraction * config.steps))
  # An EMA whose horizon 1 / (1 - decay) is half the cooldown (Hägele et al. 2024, section 4.1,
  # find EMA and SWA at a constant rate close to, not at, the cooldown's loss).
  ema_decay = ema_decay if ema_decay is not None else 1.0 - 2.0 / cooldown
  result: dict = {"config": dataclasses.asdict(config), "warmup": warmup, "cooldown": cooldown,
                  "ema_decay": ema_decay, "seed": seed, "learning_rates": list(learning_rates),
                  "eval_steps": list(range(0, config.steps + 1, config.eval_every))}
  for experiment in experiments:
    rows: dict = {}
    for lr in learning_rates:
      runs = (averaging_runs(lr, config, warmup, cooldown, ema_decay) if experiment == "averaging"
              else bf16_runs(lr, config, warmup, cooldown))
      for run in runs:
        out = train(run, config, data)
        for name, curve in out["val_loss"].items():
          rows.setdefault(name, {})[str(lr)] = {"val_loss": curve, "train_s": out["train_s"],
                                                 "compile_s": out["compile_s"]}
        print(f"{experiment} lr={lr} {run.name}: " + ", ".join(
            f"{name} {curve[-1]:.4f}" for name, curve in out["val_loss"].items())
            + f" ({out['train_s']:.1f} s)", flush=True)
    result[experiment] = rows
  return result


def table(result: dict, experiment: str) -> list[str]:
  """Markdown: final validation loss per run (rows) and learning rate (columns)."""
  rows = result[experiment]
  lrs = [str(lr) for lr in result["learning_rates"]]
  lines = ["| run | " + " | ".join(f"lr {lr}" for lr in lrs) + " |",
           "|---|" + "---|" * len(lrs)]
  for name, by_lr in rows.items():
    lines.append(f"| {name} | " + " | ".join(f"{by_lr[lr]['val_loss'][-1]:.4f}" for lr in lrs) + " |")
  return lines


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(prog="python -m benchmarks.cases.lm_precision", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--config", default="quick", choices=list(lm.CONFIGS))
  parser.add_argument("--steps", type=int, default=400)
  parser.add_argument("--eval-every", type=int, default=50)
  parser.add_argument("--experiments", default="averaging,bf16")
  parser.add_argument("--lrs", default="0.003,0.01", help="comma-separated peak learning rates")
  parser.add_argument("--seed", type=int, default=0, help="initial parameters and batch order")
  parser.add_argument("--json", default=None)
  args = parser.parse_args(argv)
  lm.set_cpu_flag()
  # Under JAX's defaults, as lm.py's case (the model broadcasts a norm's scale).
  jax.config.update("jax_numpy_dtype_promotion", "standard")
  config = dataclasses.replace(lm.CONFIGS[args.config], steps=args.steps, eval_every=args.eval_every)
  t0 = time.perf_counter()
  result = measure(config, tuple(args.experiments.split(",")),
                   tuple(float(x) for x in args.lrs.split(",")), seed=args.seed)
  result["wall_s"] = time.perf_counter() - t0
  for experiment in args.experiments.split(","):
    print(f"\n{experiment} ({config.name} config, {config.steps} steps)")
    print("\n".join(table(result, experiment)))
  if args.json:
    with open(args.json, "w") as f:
      json.dump(result, f, indent=1)


if __name__ == "__main__":
  main()
