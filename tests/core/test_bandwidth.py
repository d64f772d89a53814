"""The compiled step of the standard optimizers moves no more memory than Optax's.

Measured on the compiled program, not the clock: XLA's ``cost_analysis()`` bytes accessed per
parameter, the full-size ``copy`` instructions and the temporary buffers of a jitted
``update + apply_updates`` step with donated params and state (docs/performance-notes-bandwidth.md).
A change to ``leafwise`` or a shared block that splits a fusion, materialises the updates or
breaks donation shows up here as bytes, copies or temporaries, whatever the machine's load.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import optax
import pytest

import steadax

N, LEAVES = 4096, 2

CASES = {
    "adam": lambda lib: lib.adam(1e-3),
    "adamw": lambda lib: lib.adamw(1e-3),
    "nadamw": lambda lib: lib.adamw(1e-3, nesterov=True),
    "adamw_mu_bf16": lambda lib: lib.adamw(1e-3, mu_dtype=jnp.bfloat16),
    "sgd_momentum": lambda lib: lib.sgd(1e-3, momentum=0.9),
    "sgd_nesterov": lambda lib: lib.sgd(1e-3, momentum=0.9, nesterov=True),
    "rmsprop": lambda lib: lib.rmsprop(1e-3),
    "rmsprop_momentum": lambda lib: lib.rmsprop(1e-3, momentum=0.9),
    "adagrad": lambda lib: lib.adagrad(1e-3),
    "lion": lambda lib: lib.lion(1e-3),
    "adafactor": lambda lib: lib.adafactor(1e-3),
}


def _profile(lib, tx, dtype=jnp.float32):
  """(bytes accessed per parameter, full-size copies, temporary bytes) of the donated step."""
  params = {f"w{i}": jnp.full((N,), 1.0 + i, dtype) for i in range(LEAVES)}
  grads = {name: jnp.full((N,), 0.01, dtype) for name in params}

  def step(params, state, grads):
    updates, state = tx.update(grads, state, params)
    return lib.apply_updates(params, updates), state

  # Optax mixes weak and strong types in its own arithmetic; steadax runs under the suite's strict
  # promotion.
  with jax.numpy_dtype_promotion("standard" if lib is optax else "strict"):
    compiled = jax.jit(step, donate_argnums=(0, 1)).lower(params, tx.init(params), grads).compile()
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  entry = compiled.as_text().split("ENTRY", 1)[1]
  copies = len(re.findall(rf"\[{N}\]\{{0\}} copy\(", entry))
  return cost["bytes accessed"] / (N * LEAVES), copies, compiled.memory_analysis().temp_size_in_bytes


@pytest.mark.parametrize("name", list(CASES))
def test_step_moves_no_more_memory_than_optax(name):
  ours = _profile(steadax, CASES[name](steadax))
  theirs = _profile(optax, CASES[name](optax))
  assert ours[0] <= theirs[0] + 0.01, f"{name}: {ours[0]:.2f} bytes/parameter, Optax {theirs[0]:.2f}"
  assert ours[1] <= theirs[1], f"{name}: {ours[1]} full-size copies, Optax {theirs[1]}"
  assert ours[2] <= theirs[2] + 1024, f"{name}: {ours[2]} temporary bytes, Optax {theirs[2]}"


def test_adamw_step_is_at_the_floor_of_single_output_fusions_without_copies():
  # XLA CPU emits single-output loop fusions only, so m and v are each written by their own
  # fusion and read back by the parameter's: 12 + 12 + 16 = 40 bytes per float32 parameter,
  # against 28 for one multi-output loop. Nothing else may be added: no copy of a donated buffer,
  # no temporary the size of a leaf (DESIGN: donation-friendly).
  bytes_per_param, copies, temp = _profile(steadax, steadax.adamw(1e-3))
  assert bytes_per_param <= 40.05  # the step count and bias corrections add a few scalar bytes
  assert copies == 0
  assert temp < 4 * N
