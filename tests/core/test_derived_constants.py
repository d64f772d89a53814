"""Constants derived from hyperparameters (``_core/_module.derived_field``): Optax's Python value
whether the transformation is closed over, a jit argument, rebuilt by ``tree_map`` or injected."""

import jax
import jax.numpy as jnp
import numpy as np

import steadax
from steadax._core._module import derived, derived_field


class _Decay(steadax.Module):
  b2: float = steadax.hyper_field(0.999)
  one_minus_b2: float = derived_field(lambda t: 1 - t.b2)


def _f32(x):
  return np.float32(x).view(np.int32)


def test_closed_over_the_value_is_the_python_one():
  assert derived(_Decay(), "one_minus_b2") == 1 - 0.999  # float64, as Optax's closure has it
  assert derived(_Decay(0.95), "one_minus_b2") == 1 - 0.95


def test_a_jit_argument_rounds_as_optax_rounds_the_python_value():
  value = jax.jit(lambda t: derived(t, "one_minus_b2"))(_Decay())
  assert _f32(value) == _f32(1 - 0.999)
  # Not what float32 arithmetic on the float32 leaf gives (1.3e-5 relative off):
  assert _f32(np.float32(1) - np.float32(0.999)) != _f32(1 - 0.999)


def test_the_correction_follows_a_new_value_and_stays_a_leaf():
  tx = _Decay()
  leaves = jax.tree_util.tree_leaves(tx)
  assert len(leaves) == 2 and leaves[0] == 0.999
  moved = jax.tree_util.tree_map(lambda x: x * 0.99 if x == 0.999 else x, tx)  # rebuilt from numbers
  assert _f32(jax.jit(lambda t: derived(t, "one_minus_b2"))(moved)) == _f32(1 - 0.999 * 0.99)
  replaced = tx.replace(b2=0.9)
  assert _f32(jax.jit(lambda t: derived(t, "one_minus_b2"))(replaced)) == _f32(1 - 0.9)
  # A placeholder (eqx.partition maps leaves to False) keeps the structure.
  assert jax.tree_util.tree_structure(jax.tree_util.tree_map(lambda _: False, tx)) == jax.tree_util.tree_structure(tx)


def test_traced_and_array_hyperparameters_compute_on_their_values():
  # Built from traced values (inject_hyperparams), the value is float32 arithmetic on them, as
  # Optax's inject_hyperparams computes it.
  value = jax.jit(lambda b2: derived(_Decay(b2), "one_minus_b2"))(jnp.float32(0.999))
  assert _f32(value) == _f32(np.float32(1) - np.float32(0.999))


def test_a_new_decay_is_not_a_new_program():
  traces = []
  jitted = jax.jit(lambda tx, g: (traces.append(1), derived(tx, "one_minus_b2") * g)[1])
  jitted(_Decay(0.999), jnp.ones(2))
  jitted(_Decay(0.95), jnp.ones(2))
  assert len(traces) == 1

