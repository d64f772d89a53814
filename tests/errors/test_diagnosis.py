"""The diagnosis of ``update`` and ``apply_updates`` arguments that do not belong together reads the
trees it was given, never the text of the failing call's error (``_core/_diagnosis.py``): JAX may
reword its messages, and an error whose text happens to look like a tree error is not one.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import pytest

import steadax
from steadax._core._diagnosis import diagnose_update
from steadax._core._module import static_field
from steadax._core._transformation import Transformation

PARAMS = {"w": jnp.ones(2)}


class _TotalState(NamedTuple):
  total: Any  # mirrors the parameters
  table: Any  # does not: a dictionary of its own


class _Terse(Transformation):
  """Sums the updates; its update_fn fails with a message that says nothing about trees."""

  name = "terse"
  message: str = static_field("no")
  always: bool = static_field(False)

  def init_fn(self, params):
    return _TotalState(jax.tree.map(jnp.zeros_like, params), {"a": jnp.zeros(()), "b": jnp.zeros(())})

  def update_fn(self, updates, state, params=None, **extra_args):
    shapes = lambda tree: jax.tree.map(jnp.shape, tree)
    trees = [state.total] + ([] if params is None else [params])
    if self.always or any(shapes(updates) != shapes(t) for t in trees):
      raise ValueError(self.message)
    return updates, state._replace(total=jax.tree.map(jnp.add, state.total, updates))


@pytest.mark.x32_only
def test_update_names_the_state_path_whatever_the_error_says():
  tx = _Terse()
  state = tx.init(PARAMS)
  with pytest.raises(steadax.InputMismatchError, match=re.escape(
      "terse: the updates (gradients) and state.total have different tree structures; only in the "
      "updates (gradients): ['v']; only in state.total: ['w']. The state was made by init for "
      "other parameters: call init with these parameters.")) as info:
    tx.update({"v": jnp.ones(2)}, state)
  assert str(info.value.__cause__) == "no"  # the original error is kept as the cause
  with pytest.raises(steadax.InputMismatchError, match=re.escape(
      "terse: at ['w'], the updates (gradients) have shape (3,), state.total (2,).")):
    tx.update({"w": jnp.ones(3)}, state)
  with pytest.raises(steadax.InputMismatchError, match=re.escape(
      "terse: the updates (gradients) and the params have different tree structures; only in the "
      "updates (gradients): ['w']; only in the params: ['v']")):
    tx.update({"w": jnp.ones(2)}, state, {"v": jnp.ones(2)})
  # Inside a chain, the wrappers are named outermost first, and the path is the inner state's.
  chained = steadax.chain(steadax.identity(), tx)
  with pytest.raises(steadax.InputMismatchError, match=re.escape(
      "chain > terse: the updates (gradients) and state.total have different tree structures")):
    chained.update({"v": jnp.ones(2)}, chained.init(PARAMS))


@pytest.mark.x32_only
def test_an_error_on_trees_that_belong_together_is_raised_unchanged():
  # The text reads like one of JAX's tree errors, and the state holds a dictionary whose keys are
  # not the parameters' (`table`): the trees belong together, so the error is the transformation's.
  tx = _Terse(message="Dict key mismatch; custom node type mismatch", always=True)
  with pytest.raises(ValueError) as info:
    tx.update(PARAMS, tx.init(PARAMS), PARAMS)
  assert type(info.value) is ValueError and str(info.value).startswith("Dict key mismatch")


@pytest.mark.x32_only
def test_apply_updates_names_the_paths_when_jax_rewords_its_errors(monkeypatch):
  tree_map = jax.tree_util.tree_map

  def reworded(*args, **kwargs):
    try:
      return tree_map(*args, **kwargs)
    except (ValueError, TypeError):
      raise ValueError("the trees disagree (a wording JAX has never used)") from None

  monkeypatch.setattr(jax.tree_util, "tree_map", reworded)
  with pytest.raises(steadax.InputMismatchError, match=re.escape(
      "apply_updates: the params and the updates have different tree structures; only in the "
      "params: ['w']; only in the updates: ['v'].")):
    steadax.apply_updates({"w": jnp.ones(2)}, {"v": jnp.ones(2)})
  # None parameters take any update (apply_updates keeps them): not a mismatch.
  unset: Any = {"w": None}
  assert steadax.apply_updates(unset, {"w": {"x": jnp.ones(1)}}) == {"w": None}


@pytest.mark.x32_only
def test_the_path_is_the_innermost_container_and_other_trees_are_left_alone():
  # Before its maths runs, MultiSteps names its own accumulator (its declared role mirrors the
  # parameters). The diagnosis of a failed call names the innermost container: the moment inside
  # the inner chain's state, not the chain's tuple of states.
  params = {"w": jnp.ones(2), "b": jnp.ones(3)}
  tx = steadax.MultiSteps(steadax.adam(1e-3), 2)
  grads = {"w": jnp.ones(2), "b": jnp.ones(4)}
  with pytest.raises(steadax.InputMismatchError, match=re.escape(
      "MultiSteps: at ['b'], the updates (gradients) have shape (4,), "
      "state.acc_grads (3,). The state was made by init for other parameters")):
    tx.update(grads, tx.init(params))
  assert diagnose_update("MultiSteps", tx.init, grads, tx.init(params), None).startswith(
      "MultiSteps: at ['b'], the updates (gradients) have shape (4,), "
      "state.inner_opt_state[0].mu (3,). The state was made by init for other parameters")
  # lookahead's params are a LookaheadParams pair, not the updates' tree: its own message stands.
  tx = steadax.lookahead(steadax.adam(1e-3), 2, 0.5)
  with pytest.raises(ValueError, match="lookahead: update needs params=LookaheadParams") as info:
    tx.update({"w": jnp.ones(2), "c": jnp.ones(3)}, tx.init(params), params)
  assert not isinstance(info.value, steadax.InputMismatchError)
