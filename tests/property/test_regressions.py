"""Named regression tests: counterexamples the property tests' strategies turned up, kept as cases.

Each case is traced with ``jax.eval_shape`` (the contract in ``lax.scan`` over ``lax.cond``) and,
where the bug was in values, run for a step.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import steadax
from steadax import testing

from . import _strategies as S
from .test_contract_properties import assert_contract_in_scan_with_cond

Leaf = S.Leaf


@pytest.mark.parametrize("params", [
    [jnp.asarray(0.5, jnp.float32)],
    [jnp.ones(3, jnp.float32), jnp.asarray(0.5, jnp.float16)],
    [[jnp.ones((2, 2), jnp.float32)]],
], ids=["list_of_scalar", "list_of_vector_and_scalar", "nested_list_of_matrix"])
def test_sm3_on_a_parameter_tree_that_is_a_list(params):
  # Found by the wrapper-stack exploration (trees whose root is a list, every wrapper): SM3's
  # cover update mapped over its state with `is_leaf=list`, which took the whole parameter list for
  # one leaf ("'list' object has no attribute 'ndim'").
  tx = steadax.sm3(0.1)
  state = tx.init(params)
  updates, new_state = tx.update(testing.default_grads(params), state, params)
  assert testing.type_signature(new_state) == testing.type_signature(state)
  assert testing.type_signature(updates) == testing.type_signature(params)
  assert_contract_in_scan_with_cond(steadax.MultiSteps(steadax.sm3(0.1), 2).gradient_transformation(),
                                    S.abstract([Leaf((), jnp.float32), Leaf((), jnp.float16)]))


def test_lookahead_over_a_clip_chain_on_a_scalar_tree():
  # The first shrunk counterexample (sgd, a scalar float32 tree, a clipping chain, lookahead with
  # sync period 1): lookahead's gradients are those of the fast parameters only, its parameters
  # LookaheadParams(fast, slow); fed the whole pair, every transformation reports mismatched trees.
  params = S.abstract(Leaf((), jnp.float32))
  tx = steadax.lookahead(S.wrap("clip_chain", 1, steadax.sgd(0.1)), sync_period=1, slow_step_size=0.5)
  assert_contract_in_scan_with_cond(tx, steadax.LookaheadParams(fast=params, slow=params),
                                    lambda p: testing.default_grads(p.fast))
