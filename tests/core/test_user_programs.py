"""Using steadax never makes JAX recompile the user's other programs (issue 35 §4).

A JAX user context is part of every jit cache key from the moment it is registered: steadax used to
register its strict-mode context when first imported, so the first steadax object of a process
made JAX trace and compile again every function the user had jitted. Registration now waits for
the first ``set_strict``/``strict_mode`` (``_core/_config.py``). The test suite's conftest sets
strict mode at import, so this runs in a fresh interpreter.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

_PROGRAM = r"""
import json
import jax, jax.numpy as jnp

before = jax.jit(lambda x: jnp.sin(x) * 2)
before(jnp.ones(3))                                 # jitted before steadax is imported
import steadax
after = jax.jit(lambda x: jnp.cos(x) * 2)
after(jnp.ones(3))                                  # jitted after the import, before any steadax object

params = {"w": jnp.ones(3), "b": jnp.zeros(2)}
state = steadax.adam(1e-3).init(params)
updates, _ = steadax.adam(1e-3).update(params, state, params)   # un-jitted
steadax.apply_updates(params, updates)
steps = []
for tx in (steadax.adam(1e-3), steadax.adamw(1e-3, mask=lambda p: {"w": True, "b": False}),
           steadax.inject_hyperparams(steadax.lion)(learning_rate=1e-4)):
  state = tx.init(params)
  jax.eval_shape(tx.init, params)
  traces = []
  def step(tx, state, params):
    traces.append(steadax.is_strict())
    return tx.update(params, state, params)
  step = jax.jit(step)
  step(tx, state, params)
  steps.append((step, tx, state, traces))

before(jnp.ones(3)); after(jnp.ones(3))
sizes = [before._cache_size(), after._cache_size()]
# Strict mode's documented effect: a trace made before it was turned on is not reused.
steadax.set_strict(True)
step, tx, state, traces = steps[0]
step(tx, state, params)
before(jnp.ones(3))
print(json.dumps({"sizes": sizes, "strict_traces": traces, "before_after_strict": before._cache_size()}))
"""


@pytest.mark.x32_only  # JAX's cache keys, not dtypes: the x64 pass would repeat the same
def test_importing_building_initialising_updating_recompiles_nothing_of_the_users():
  run = subprocess.run([sys.executable, "-c", _PROGRAM], capture_output=True, text=True, timeout=300)
  assert run.returncode == 0, run.stderr
  result = json.loads(run.stdout.strip().splitlines()[-1])
  # One trace each: neither the import (function jitted before it) nor building, initialising and
  # updating transformations (function jitted after the import) invalidated them.
  assert result["sizes"] == [1, 1]
  # Turning strict mode on traces the steadax step again, in strict mode, and the user's function
  # (whose cached trace has no strict value in its key) once more, as documented.
  assert result["strict_traces"] == [False, True]
  assert result["before_after_strict"] == 2
