"""Property tests of the type-stability contract over random trees and random wrapper stacks.

Random parameter trees (nested dicts, lists, tuples, NamedTuples; float16, bfloat16, float32,
float64 under x64, complex where the entry supports it; scalars, zero-size and large leaves), random
registry entries with random hyperparameters in range, wrapped in 1-3 random wrappers (and
lookahead outermost): the state, params and updates keep their types through ``lax.scan`` over a
``lax.cond`` step. Traced with ``jax.eval_shape`` only (no compilation), so trees can vary freely.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from hypothesis import given, settings
from hypothesis import strategies as st

import steadax
from steadax import testing

from ..conformance.registry import all_entries
from . import _strategies as S

# Entries fed only gradients (line searches and Polyak steps need the whole model's value_fn, which
# restructuring wrappers cannot forward; the matrix covers them inside the other wrappers).
ENTRIES = [e for e in all_entries() if e.extra_args is None]


def _scan_cond_types(tx, params, grads_fn=testing.default_grads):
  """The types of (params, state, last updates) after 3 steps of ``lax.scan`` whose body runs the
  update under ``lax.cond`` (a traced predicate: both branches traced), and of the fresh state."""
  state = jax.eval_shape(tx.init, params)

  def run(tx, params, state, preds):
    def body(carry, pred):
      p, s = carry
      u, s = jax.lax.cond(
          pred, lambda: tx.update(grads_fn(p), s, p),
          lambda: (jax.tree_util.tree_map(jnp.zeros_like, p), s))
      return (steadax.apply_updates(p, u), s), u

    (p, s), us = jax.lax.scan(body, (params, state), preds)
    return p, s, jax.tree_util.tree_map(lambda u: u[-1], us)

  p, s, u = jax.eval_shape(run, tx, params, state, jax.ShapeDtypeStruct((3,), jnp.bool_))
  return state, p, s, u


def assert_contract_in_scan_with_cond(tx, params, grads_fn=testing.default_grads):
  state, p, s, u = _scan_cond_types(tx, params, grads_fn)
  assert testing.type_signature(s) == testing.type_signature(state), "state changed type"
  assert testing.type_signature(p) == testing.type_signature(params), "params changed type"
  assert testing.type_signature(u) == testing.type_signature(params), "updates differ from params"


@settings(S.BASE, max_examples=S.examples(40))
@given(data=st.data())
def test_contract_holds_inside_scan_with_cond(data):
  entry = data.draw(st.sampled_from(ENTRIES), label="entry")
  spec = data.draw(S.tree_specs(entry.low_precision_ok, entry.complex_ok), label="tree")
  stack = data.draw(S.stacks(), label="wrappers (innermost first)")
  factor = data.draw(st.floats(0.5, 1.0), label="hyperparameter factor")
  lookahead = data.draw(st.sampled_from([None, 1, 2]), label="lookahead sync period")
  tx = S.apply_stack(stack, testing.perturb_hyperparameters(entry.factory(), factor))
  params = S.abstract(spec)
  grads_fn = testing.default_grads
  if lookahead is not None:
    # Lookahead's parameters are (fast, slow); its gradients are the fast parameters' only.
    tx = steadax.lookahead(tx, sync_period=lookahead, slow_step_size=0.5)
    params = steadax.LookaheadParams(fast=params, slow=params)
    grads_fn = lambda p: testing.default_grads(p.fast)
  assert_contract_in_scan_with_cond(tx, params, grads_fn)
