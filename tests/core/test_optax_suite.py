"""Core behaviours that Optax's own tests (tools/optax_tests.py) found different, fixed to match."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax

UPDATES = {"a": jnp.asarray([3.0, 4.0], jnp.float32)}


def test_hyperparameter_checks_see_bfloat16_values():
  # numpy does not count bfloat16 as a number: the check skipped it and accepted b1=5.
  for dtype in (jnp.bfloat16, jnp.float16, jnp.float32):
    with pytest.raises(ValueError, match="adam: b1 must lie in"):
      steadax.adam(1e-3, b1=jnp.asarray(5.0, dtype))
  steadax.adam(1e-3, b1=jnp.asarray(0.5, jnp.bfloat16))  # in range: accepted


@pytest.mark.parametrize("state", [None, {}], ids=["None", "empty-dict"])
def test_stateless_transformations_ignore_a_placeholder_state(state):
  # Optax's idiom `clip_by_global_norm(1.).update(u, None)`: the state is given back as it is.
  updates, new_state = steadax.clip_by_global_norm(1.0).update(UPDATES, state)
  np.testing.assert_allclose(np.asarray(updates["a"]), [0.6, 0.8], rtol=1e-6)
  assert new_state == state
  updates, new_state = jax.jit(steadax.scale(0.1).update)(UPDATES, state)
  np.testing.assert_allclose(np.asarray(updates["a"]), [0.3, 0.4], rtol=1e-6)
  assert new_state == state
  # A state record of another transformation is still refused.
  with pytest.raises(steadax.InputMismatchError, match="scale"):
    steadax.scale(0.1).update(UPDATES, steadax.ScaleByAdamState(jnp.zeros([], jnp.int32), {}, {}))


def test_function_pair_update_gets_the_arguments_it_takes():
  # Optax's GradientTransformation is a NamedTuple: `update(g, s)` calls the function with (g, s).
  two = steadax.GradientTransformation(lambda p: steadax.EmptyState(), lambda u, s: (u, s))
  updates, _ = two.update(UPDATES, two.init(UPDATES))
  assert updates["a"] is UPDATES["a"]
  seen = []
  three = steadax.GradientTransformation(
      lambda p: steadax.EmptyState(), lambda u, s, p: (seen.append(p), (u, s))[1])
  three.update(UPDATES, three.init(UPDATES))
  three.update(UPDATES, three.init(UPDATES), UPDATES)
  assert seen == [None, UPDATES]
  extra = steadax.GradientTransformationExtraArgs(
      lambda p: steadax.EmptyState(), lambda u, s, **kw: (u, s))
  assert extra.update(UPDATES, extra.init(UPDATES), value=1.0)[0]["a"] is UPDATES["a"]


@pytest.mark.parametrize("count", [jnp.asarray(True), jnp.asarray(1 + 1j, jnp.complex64)],
                         ids=["bool", "complex"])
def test_safe_increment_refuses_counts_without_an_order(count):
  with pytest.raises(ValueError, match="safe_increment: cannot safely increment.*"):
    steadax.safe_increment(count)


@pytest.mark.parametrize("factory", [
    lambda: steadax.lbfgs(),
    lambda: steadax.scale_by_backtracking_linesearch(max_backtracking_steps=15),
    lambda: steadax.contrib.prodigy(),
    lambda: steadax.contrib.dadapt_adamw(),
    lambda: steadax.contrib.dog(),
], ids=["lbfgs", "backtracking", "prodigy", "dadapt_adamw", "dog"])
def test_scalar_statistics_of_numpy_float64_params_follow_the_x64_mode(factory):
  # numpy float64 parameters with x64 off: the statistics are float32, what jnp makes of float64.
  state = factory().init(np.ones(2))  # not eval_shape: it would canonicalize the input itself
  expected = jax.dtypes.canonicalize_dtype(np.float64)
  floats = {leaf.dtype for leaf in jax.tree_util.tree_leaves(state)
            if jnp.issubdtype(leaf.dtype, jnp.floating) and leaf.shape == ()}
  assert floats == {np.dtype(expected)}
