"""Numeric property tests: finite updates, descent on a convex problem, identities, chain
associativity and an all-False mask.

JAX compiles once per tree structure and transformation structure: the trees come from the small
pool ``STRUCTURES`` (random values each example), the identities run un-jitted (each primitive is
compiled once per shape and dtype and cached), and the compiled properties draw few examples.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import steadax
from steadax import testing

from ..conformance.registry import all_entries
from . import _strategies as S
from ._strategies import Leaf, Pair

F32, F16, BF16 = jnp.float32, jnp.float16, jnp.bfloat16
STRUCTURES = [
    {"w": Leaf((2, 3), F32), "bias": Leaf((3,), F32)},
    [Leaf((4,), BF16), {"kernel": Leaf((2, 2), F16), "bias": Leaf((), F32)}],
    Pair(Leaf((3,), F32), (Leaf((0, 2), F32), Leaf((1, 1, 2), BF16))),
]
if S.X64:
  STRUCTURES.append({"w": Leaf((3,), jnp.float64), "b": Leaf((2,), F32)})
COMPLEX_STRUCTURES = [{"z": Leaf((3,), jnp.complex64), "x": Leaf((2,), F32)}]

# Descent-type optimizers: on a convex quadratic with a small learning rate, no step raises the loss.
DESCENT = {
    "sgd": lambda lr: steadax.sgd(lr),
    "sgd_momentum": lambda lr: steadax.sgd(lr, momentum=0.9),
    "adam": lambda lr: steadax.adam(lr),
    "nadam": lambda lr: steadax.nadam(lr),
    "adabelief": lambda lr: steadax.adabelief(lr),
    "rmsprop": lambda lr: steadax.rmsprop(lr),
    "adagrad": lambda lr: steadax.adagrad(lr),
    "lion": lambda lr: steadax.lion(lr),
    "lamb": lambda lr: steadax.lamb(lr),
}
ENTRIES = [e for e in all_entries() if e.extra_args is None]


def _loss(params):
  """``sum 0.5 |x - 0.1|^2`` in float32 (``testing.default_grads`` is its gradient)."""
  total = jnp.zeros([], jnp.float32)
  for x in jax.tree_util.tree_leaves(params):
    d = (x - jnp.asarray(0.1, x.dtype)).astype(jnp.float32)
    total = total + 0.5 * jnp.sum(d * d)
  return total


def _step(tx, params, state):
  updates, state = tx.update(testing.default_grads(params), state, params)
  return steadax.apply_updates(params, updates), state, updates


_STEP = jax.jit(_step)  # one module-level program cache, shared by every example


def _assert_all_finite(tree, what):
  for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
    if jnp.issubdtype(leaf.dtype, jnp.inexact):
      values = np.asarray(leaf.astype(jnp.complex64 if jnp.iscomplexobj(leaf) else jnp.float32))
      assert np.all(np.isfinite(values)), f"{what}: non-finite at {jax.tree_util.keystr(path)}"


def _equal(a, b):
  la, da = jax.tree_util.tree_flatten(a)
  lb, db = jax.tree_util.tree_flatten(b)
  assert da == db
  for x, y in zip(la, lb):
    assert x.dtype == y.dtype and x.shape == y.shape
    assert np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True)


@settings(S.BASE, max_examples=S.examples(6))
@given(entry=st.sampled_from(ENTRIES), structure=st.sampled_from(STRUCTURES + COMPLEX_STRUCTURES),
       stack=S.stacks(), factor=st.floats(0.5, 1.0), seed=st.integers(0, 2**16))
def test_updates_are_finite_for_finite_inputs(entry, structure, stack, factor, seed):
  assume(entry.low_precision_ok or structure in (STRUCTURES[0], COMPLEX_STRUCTURES[0]))
  assume(entry.complex_ok or structure is not COMPLEX_STRUCTURES[0])
  tx = S.apply_stack(stack, testing.perturb_hyperparameters(entry.factory(), factor))
  params = S.build(structure, seed)
  state = tx.init(params)
  for i in range(3):
    params, state, updates = _STEP(tx, params, state)
    _assert_all_finite(updates, f"updates at step {i}")
    _assert_all_finite(params, f"params at step {i}")


@settings(S.BASE, max_examples=S.examples(6))
@given(name=st.sampled_from(sorted(DESCENT)), lr=st.floats(1e-3, 1e-2),
       structure=st.sampled_from(STRUCTURES), stack=st.one_of(st.just([]), S.stacks(S.DESCENT_WRAPPERS)),
       seed=st.integers(0, 2**16))
def test_convex_loss_does_not_rise_for_descent_optimizers(name, lr, structure, stack, seed):
  # Parameters at least 0.4 from the optimum 0.1; 4 steps of at most ~0.2 in total cannot overshoot.
  params = jax.tree_util.tree_map(lambda x: (jnp.abs(x) * 0.75 + 0.5).astype(x.dtype),
                                  S.build(structure, seed))
  tx = S.apply_stack(stack, DESCENT[name](lr))
  state = tx.init(params)
  losses = [float(_loss(params))]
  for _ in range(4):
    params, state, _ = _STEP(tx, params, state)
    losses.append(float(_loss(params)))
  rises = [b - a for a, b in zip(losses, losses[1:]) if b > a * (1 + 1e-6)]
  assert not rises, f"loss rose: {losses}"


def _small_trees():
  return st.one_of(st.sampled_from(STRUCTURES + COMPLEX_STRUCTURES),
                   S.tree_specs(low_precision=True, complex_ok=True, large=False))


@settings(S.BASE, max_examples=S.examples(12))
@given(structure=_small_trees(), seed=st.integers(0, 2**16), with_params=st.booleans())
def test_identity_and_scale_one_are_identities(structure, seed, with_params):
  grads = S.build(structure, seed)
  params = S.build(structure, seed + 1) if with_params else None
  for tx in (steadax.identity(), steadax.scale(1.0)):
    state = tx.init(grads)
    updates, new_state = tx.update(grads, state, params)
    _equal(updates, grads)
    assert testing.type_signature(new_state) == testing.type_signature(state)


BLOCKS = {
    "scale_by_adam": lambda f: steadax.scale_by_adam(b1=0.9 * f, b2=0.999),
    "clip_by_global_norm": lambda f: steadax.clip_by_global_norm(f),
    "scale": lambda f: steadax.scale(-f),
    "trace": lambda f: steadax.trace(decay=0.9 * f),
    "scale_by_rms": lambda f: steadax.scale_by_rms(decay=0.9 * f),
    "add_decayed_weights": lambda f: steadax.add_decayed_weights(1e-2 * f),
    "clip": lambda f: steadax.clip(f),
    "scale_by_sign": lambda f: steadax.scale_by_sign(),
}


@settings(S.BASE, max_examples=S.examples(8))
@given(names=st.lists(st.sampled_from(sorted(BLOCKS)), min_size=3, max_size=3),
       factors=st.lists(st.floats(0.5, 1.0), min_size=3, max_size=3),
       structure=st.sampled_from(STRUCTURES), seed=st.integers(0, 2**16))
def test_chain_is_associative(names, factors, structure, seed):
  a, b, c = (BLOCKS[n](f) for n, f in zip(names, factors))
  params = S.build(structure, seed)
  grads = S.build(structure, seed + 1)
  results = []
  for tx in (steadax.chain(steadax.chain(a, b), c), steadax.chain(a, steadax.chain(b, c)),
             steadax.chain(a, b, c)):
    state = tx.init(params)
    for _ in range(2):  # the second step reads the state the first wrote
      updates, state = tx.update(grads, state, params)
    results.append(updates)
  _equal(results[0], results[1])
  _equal(results[0], results[2])


@settings(S.BASE, max_examples=S.examples(8))
@given(name=st.sampled_from(sorted(DESCENT)), structure=st.sampled_from(STRUCTURES),
       seed=st.integers(0, 2**16), mask_as_function=st.booleans())
def test_masked_with_an_all_false_mask_changes_nothing(name, structure, seed, mask_as_function):
  params = S.build(structure, seed)
  grads = S.build(structure, seed + 1)
  mask = jax.tree_util.tree_map(lambda _: False, params)
  tx = steadax.masked(DESCENT[name](0.1), (lambda p: mask) if mask_as_function else mask)
  state = tx.init(params)
  for _ in range(2):
    updates, state = tx.update(grads, state, params)
    _equal(updates, grads)
