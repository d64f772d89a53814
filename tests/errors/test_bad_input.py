"""Bad input as a new user would write it: each mistake gets a message naming the transformation,
the argument and the tree path (issue 13, "Bad input and edge input"; docs/guarantees.md, "Errors").
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import steadax

PARAMS = {"w": jnp.ones(2), "b": jnp.ones(1)}


# ---------------------------------------------------------------------------------------------
# Transformations handed to chain, partition, masked and every wrapper.

WRAPPERS = {
    "chain": lambda t: steadax.chain(steadax.clip_by_global_norm(1.0), t),
    "named_chain": lambda t: steadax.named_chain(("clip", steadax.clip(1.0)), ("opt", t)),
    "masked": lambda t: steadax.masked(t, {"w": True, "b": False}),
    "partition": lambda t: steadax.partition({"a": t}, "a"),
    "multi_transform": lambda t: steadax.multi_transform({"a": t}, "a"),
    "groups": lambda t: steadax.groups({"*": t}),
    "MultiSteps": lambda t: steadax.MultiSteps(t, 2),
    "apply_if_finite": lambda t: steadax.apply_if_finite(t, 2),
    "skip_spikes": lambda t: steadax.skip_spikes(t),
    "conditionally_transform": lambda t: steadax.conditionally_transform(t, lambda s: s > 0),
    "conditionally_mask": lambda t: steadax.conditionally_mask(t, lambda s: s > 0),
    "lookahead": lambda t: steadax.lookahead(t, 2, 0.5),
    "flatten": lambda t: steadax.flatten(t),
    "fuse": lambda t: steadax.fuse(t),
    "mechanize": lambda t: steadax.contrib.mechanize(t),
    "schedule_free": lambda t: steadax.contrib.schedule_free(t, 1.0),
    "sam": lambda t: steadax.contrib.sam(t, steadax.sgd(0.1)),
    "split_real_and_imaginary": lambda t: steadax.contrib.split_real_and_imaginary(t),
}
# The owner each message starts with (partition reports Optax's older name as partition).
OWNER = {"multi_transform": "partition"}


@pytest.mark.x32_only
@pytest.mark.parametrize("wrapper", sorted(WRAPPERS))
def test_factory_in_place_of_a_transformation_is_named_at_construction(wrapper):
  with pytest.raises(TypeError) as info:
    WRAPPERS[wrapper](steadax.adam)
  message = str(info.value)
  assert message.startswith(OWNER.get(wrapper, wrapper) + ":"), message
  assert "the function `adam`, not a transformation" in message
  assert "call it, e.g. `adam(learning_rate)`" in message


@pytest.mark.x32_only
@pytest.mark.parametrize("wrapper", sorted(WRAPPERS))
def test_non_transformation_is_named_at_construction(wrapper):
  with pytest.raises(TypeError) as info:
    WRAPPERS[wrapper](0.1)
  message = str(info.value)
  assert message.startswith(OWNER.get(wrapper, wrapper) + ":"), message
  assert "must be a transformation" in message and "got float 0.1" in message


@pytest.mark.x32_only
def test_chain_names_the_argument_and_the_factory_call():
  with pytest.raises(TypeError, match=re.escape(
      "chain: argument 2 is the function `adam`, not a transformation: it builds one; call it, "
      "e.g. `adam(learning_rate)`.")):
    steadax.chain(steadax.clip_by_global_norm(1.0), steadax.adam)
  with pytest.raises(TypeError, match=re.escape("partition: transforms['slow'] is the class `MultiSteps`")):
    steadax.partition({"slow": steadax.MultiSteps}, "slow")
  with pytest.raises(TypeError, match="named_chain: argument 1 must be a \\(name, transformation\\) pair"):
    steadax.named_chain(steadax.adam(1e-3))
  with pytest.raises(TypeError, match="inject_hyperparams: inner_factory must be the factory"):
    steadax.inject_hyperparams(steadax.adam(1e-3))
  with pytest.raises(TypeError, match=re.escape("inject_hyperparams(adam): got an unexpected keyword argument 'lr'")):
    steadax.inject_hyperparams(steadax.adam)(learning_rate=0.1, lr=0.1)


@pytest.mark.x32_only
def test_optax_transformations_are_still_accepted():
  tx = steadax.chain(optax.clip(1.0), steadax.masked(optax.sgd(1.0), {"w": True, "b": False}))
  updates, _ = tx.update(PARAMS, tx.init(PARAMS), PARAMS)
  np.testing.assert_allclose(updates["w"], -1.0)
  np.testing.assert_allclose(updates["b"], 1.0)


# ---------------------------------------------------------------------------------------------
# Schedules.

@pytest.mark.x32_only
def test_schedule_returning_an_array_is_rejected_at_construction():
  with pytest.raises(ValueError, match=re.escape(
      "sgd: the schedule given as learning_rate returned shape (2,); a schedule must return a scalar")):
    steadax.sgd(lambda count: jnp.array([0.1, 0.2]))
  with pytest.raises(ValueError, match="adamw: the schedule given as learning_rate returned shape"):
    steadax.adamw(lambda count: jnp.full((1,), 0.1))
  with pytest.raises(TypeError, match="sgd: the schedule given as learning_rate must take one argument"):
    steadax.sgd(lambda: 0.1)


@pytest.mark.x32_only
def test_schedule_returning_an_array_is_rejected_when_it_runs():
  # scale_by_schedule takes any callable; the value is checked where it is used, with its owner.
  tx = steadax.scale_by_schedule(lambda count: jnp.array([1.0, 2.0]))
  with pytest.raises(ValueError, match="scale_by_schedule: the hyperparameter 'factor' has shape \\(2,\\)"):
    tx.update(jnp.ones(2), tx.init(jnp.ones(2)))


@pytest.mark.x32_only
def test_every_k_schedule_below_one():
  with pytest.raises(ValueError, match="every_k_schedule must be at least 1, got 0"):
    steadax.MultiSteps(steadax.sgd(1.0), 0)
  with pytest.raises(ValueError, match=re.escape("MultiSteps: every_k_schedule(0) returned 0")):
    steadax.MultiSteps(steadax.sgd(1.0), lambda step: 0)
  with pytest.raises(ValueError, match="the schedule given as every_k_schedule returned shape"):
    steadax.MultiSteps(steadax.sgd(1.0), lambda step: jnp.array([2, 2]))
  # A schedule that reaches 0 later: raised when it is seen outside jit ...
  ms = steadax.MultiSteps(steadax.sgd(1.0), lambda step: jnp.where(step > 0, 0, 2))
  params = jnp.ones(1)
  state = ms.init(params)
  for _ in range(2):
    _, state = ms.update(params, state, params)
  with pytest.raises(ValueError, match=re.escape("every_k_schedule(gradient_step) returned 0")):
    ms.update(params, state, params)
  # ... and counted as 1 inside jit (documented): every mini-step then updates.
  updates, state = jax.jit(ms.update)(params, state, params)
  np.testing.assert_allclose(updates, -1.0)
  assert int(state.gradient_step) == 2 and int(state.mini_step) == 0


# ---------------------------------------------------------------------------------------------
# update's arguments that do not belong together.

@pytest.mark.x32_only
def test_state_of_another_optimizer():
  state = steadax.sgd(0.1, momentum=0.9).init(PARAMS)
  with pytest.raises(steadax.InputMismatchError) as info:
    steadax.adam(1e-3).update(PARAMS, state, PARAMS)
  message = str(info.value)
  assert message.startswith("chain > scale_by_adam: update was given a TraceState"), message
  assert "this state is not scale_by_adam's state" in message
  assert isinstance(info.value, TypeError) and isinstance(info.value, ValueError)
  # A wrapper's state given to a chain, the params given as the state, no state at all.
  for bad in (steadax.masked(steadax.adam(1e-3), True).init(PARAMS), PARAMS, None):
    with pytest.raises(steadax.InputMismatchError, match="chain: update was given .* this state is not this chain's state"):
      steadax.adam(1e-3).update(PARAMS, bad, PARAMS)
  with pytest.raises(steadax.InputMismatchError, match="MultiSteps: update was given a NoneType"):
    steadax.MultiSteps(steadax.sgd(1.0), 2).update(PARAMS, None, PARAMS)


@pytest.mark.x32_only
def test_gradients_with_other_keys_than_the_state_or_params():
  tx = steadax.adam(1e-3)
  state = tx.init({"w": jnp.ones(2)})
  with pytest.raises(steadax.InputMismatchError, match=re.escape(
      "chain > scale_by_adam: the updates (gradients) and state.mu have different tree structures; "
      "only in the updates (gradients): ['v']; only in state.mu: ['w']. The state was made by init "
      "for other parameters")):
    tx.update({"v": jnp.ones(2)}, state)
  with pytest.raises(steadax.InputMismatchError, match=re.escape(
      "the updates (gradients) and the params have different tree structures; only in the updates "
      "(gradients): ['w']; only in the params: ['v']")):
    tx.update({"w": jnp.ones(2)}, state, {"v": jnp.ones(2)})
  with pytest.raises(steadax.InputMismatchError, match=re.escape(
      "at ['w'], the updates (gradients) have shape (3,), state.mu (2,)")):
    tx.update({"w": jnp.ones(3)}, state)


@pytest.mark.x32_only
def test_apply_updates_names_the_differing_paths():
  with pytest.raises(steadax.InputMismatchError, match=re.escape(
      "apply_updates: the params and the updates have different tree structures; only in the "
      "params: ['w']; only in the updates: ['v'].")):
    steadax.apply_updates({"w": jnp.ones(2)}, {"v": jnp.ones(2)})
  with pytest.raises(steadax.InputMismatchError, match=re.escape(
      "apply_updates: at ['w'], the params have shape (2,), the updates (3,).")):
    steadax.apply_updates({"w": jnp.ones(2)}, {"w": jnp.ones(3)})


@pytest.mark.x32_only
def test_missing_params_and_extra_arguments_are_named():
  with pytest.raises(ValueError, match="add_decayed_weights: `params` must be passed to update"):
    tx = steadax.adamw(1e-3)
    tx.update(PARAMS, tx.init(PARAMS))
  with pytest.raises(ValueError, match="lookahead: update needs params=LookaheadParams"):
    tx = steadax.lookahead(steadax.sgd(0.1), 2, 0.5)
    tx.update(PARAMS, tx.init(PARAMS))
  with pytest.raises(TypeError, match="scale_by_polyak: update\\(\\) needs the keyword argument `value`"):
    tx = steadax.polyak_sgd()
    tx.update(PARAMS, tx.init(PARAMS), PARAMS)
  with pytest.raises(ValueError, match="reduce_on_plateau: update\\(\\) needs the loss"):
    tx = steadax.contrib.reduce_on_plateau()
    tx.update(PARAMS, tx.init(PARAMS), PARAMS)
  with pytest.raises(TypeError, match=re.escape("chain: the parameter at ['w'] is a str ('abc')")):
    steadax.adam(1e-3).init({"w": "abc"})


@pytest.mark.x32_only
def test_state_get_lists_ambiguous_paths_one_per_line():
  state = steadax.chain(steadax.adam(1e-3), steadax.adamw(1e-3)).init(PARAMS)
  with pytest.raises(KeyError) as info:
    steadax.state_get(state, "count")
  lines = str(info.value).splitlines()
  assert lines[0].startswith("state_get: 2 entries are named 'count'; pass `label`"), lines
  assert lines[1:] == ["  [0][0]ScaleByAdamState.count", "  [1][0]ScaleByAdamState.count"]


# ---------------------------------------------------------------------------------------------
# Python numbers as parameters work as in Optax, and type-stably.

def _arrays(tx):
  """An Optax transformation fed arrays of the default dtype in place of Python floats."""
  as_arrays = lambda tree: jax.tree.map(jnp.asarray, tree)
  return optax.GradientTransformation(
      lambda p: tx.init(as_arrays(p)),
      lambda u, s, p=None: tx.update(as_arrays(u), s, None if p is None else as_arrays(p)))


FLOAT_LEAF_CASES = {
    "adam": (lambda: steadax.adam(1e-2), lambda: optax.adam(1e-2)),
    "sgd": (lambda: steadax.sgd(0.1), lambda: optax.sgd(0.1)),
    "sgd_momentum": (lambda: steadax.sgd(0.1, momentum=0.9), lambda: optax.sgd(0.1, momentum=0.9)),
    # Optax's clip_by_global_norm fails on Python floats ('float' object has no attribute
    # 'dtype'); its adamw after an Optax clip written for arrays is the reference.
    "clip+adamw": (lambda: steadax.chain(steadax.clip_by_global_norm(1.0), steadax.adamw(1e-2)),
                   lambda: optax.chain(_arrays(optax.clip_by_global_norm(1.0)), optax.adamw(1e-2))),
    "apply_if_finite": (lambda: steadax.apply_if_finite(steadax.adam(1e-2), 2),
                        lambda: optax.apply_if_finite(optax.adam(1e-2), 2)),
    "MultiSteps": (lambda: steadax.MultiSteps(steadax.adam(1e-2), 2),
                   lambda: optax.MultiSteps(optax.adam(1e-2), 2)),
    "masked": (lambda: steadax.masked(steadax.lion(1e-2), {"w": True, "b": False}),
               lambda: optax.masked(optax.lion(1e-2), {"w": True, "b": False})),
    "inject_hyperparams": (lambda: steadax.inject_hyperparams(steadax.adam)(1e-2),
                           lambda: optax.inject_hyperparams(optax.adam)(1e-2)),
}


@pytest.mark.parametrize("case", sorted(FLOAT_LEAF_CASES))
def test_python_float_parameter_leaves(case):
  make_ours, make_theirs = FLOAT_LEAF_CASES[case]
  ours = make_ours()
  with jax.numpy_dtype_promotion("standard"):  # Optax, the reference, is not strict-clean
    theirs = make_theirs()
  default = jnp.asarray(1.0).dtype  # float32, or float64 under x64: a Python float's dtype in JAX
  params, grads = {"w": 1.5, "b": -0.5}, {"w": 0.25, "b": 1.0}
  state = ours.init(params)
  with jax.numpy_dtype_promotion("standard"):
    ref_state = theirs.init(params)
  for leaf in jax.tree_util.tree_leaves(state):
    assert not leaf.weak_type, state
  ref_params = p = params
  for _ in range(3):
    updates, new_state = ours.update(grads, state, p)
    with jax.numpy_dtype_promotion("standard"):
      ref_updates, ref_state = theirs.update(grads, ref_state, ref_params)
    for leaf in jax.tree_util.tree_leaves(updates):
      assert leaf.dtype == default and not leaf.weak_type
    # The state keeps its types, so the jitted step takes the same state again.
    assert jax.tree.map(lambda a: (a.dtype, a.shape, a.weak_type), new_state) == jax.tree.map(
        lambda a: (a.dtype, a.shape, a.weak_type), state)
    state = new_state
    p = steadax.apply_updates(p, updates)
    with jax.numpy_dtype_promotion("standard"):
      ref_params = optax.apply_updates(ref_params, ref_updates)
  jitted = jax.jit(ours.update)(grads, state, p)  # Python floats reach jit as weak tracers
  assert jax.tree.map(lambda a: (a.dtype, a.weak_type), jitted[1]) == jax.tree.map(
      lambda a: (a.dtype, a.weak_type), state)
  for name in params:
    np.testing.assert_allclose(p[name], ref_params[name], rtol=1e-5, atol=1e-7)
