"""Transformations compare by value: class, static fields and leaf values (``_core/_module.py``)."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax

pytestmark = pytest.mark.x32_only  # equality reads values, not dtypes


def _schedule(peak):
  return steadax.warmup_cosine_decay_schedule(0.0, peak, 10, 100)


EQUAL_PAIRS = {
    "adam": lambda: steadax.adam(1e-3),
    "adam_int_float": lambda: steadax.adam(1),  # 1 and 1.0 are the same value
    "array_leaves": lambda: steadax.adamw(jnp.asarray(1e-3), weight_decay=np.float32(0.1)),
    "chain": lambda: steadax.chain(steadax.clip_by_global_norm(1.0), steadax.adam(1e-3)),
    "schedule": lambda: steadax.adam(_schedule(1e-3)),
    "nested_wrappers": lambda: steadax.MultiSteps(
        steadax.lookahead(steadax.apply_if_finite(steadax.sgd(0.1, momentum=0.9), 3), 5, 0.5), 4),
    "inject": lambda: steadax.inject_hyperparams(steadax.adam)(learning_rate=_schedule(1e-3)),
    "named_chain": lambda: steadax.named_chain(("clip", steadax.clip(1.0)), ("sgd", steadax.sgd(0.1))),
}


@pytest.mark.parametrize("name", sorted(EQUAL_PAIRS))
def test_equal_when_built_alike(name):
  a, b = EQUAL_PAIRS[name](), EQUAL_PAIRS[name]()
  assert a is not b
  assert a == b and not a != b
  assert hash(a) == hash(b)
  assert len({a, b}) == 1


UNEQUAL_PAIRS = {
    "learning_rate": (lambda: steadax.adam(1e-3), lambda: steadax.adam(2e-3)),
    "static_flag": (lambda: steadax.adam(1e-3), lambda: steadax.adam(1e-3, nesterov=True)),
    "class": (lambda: steadax.adam(1e-3), lambda: steadax.adamw(1e-3, weight_decay=0.0)),
    "array_value": (lambda: steadax.sgd(jnp.asarray(0.1)), lambda: steadax.sgd(jnp.asarray(0.2))),
    # Leaves of another shape (built by a tree_map, which skips the factory's checks).
    "array_shape": (lambda: steadax.sgd(jnp.asarray(0.1)),
                    lambda: jax.tree_util.tree_map(lambda x: jnp.full((2,), x), steadax.sgd(0.1))),
    "chain_inner": (
        lambda: steadax.chain(steadax.clip(1.0), steadax.adam(1e-3)),
        lambda: steadax.chain(steadax.clip(2.0), steadax.adam(1e-3))),
    "chain_length": (
        lambda: steadax.chain(steadax.adam(1e-3)),
        lambda: steadax.chain(steadax.adam(1e-3), steadax.identity())),
    "schedule_value": (lambda: steadax.adam(_schedule(1e-3)), lambda: steadax.adam(_schedule(2e-3))),
    "deep_wrapper_value": (
        lambda: steadax.MultiSteps(steadax.lookahead(steadax.sgd(0.1), 5, 0.5), 4),
        lambda: steadax.MultiSteps(steadax.lookahead(steadax.sgd(0.1), 5, 0.6), 4)),
    "every_k": (
        lambda: steadax.MultiSteps(steadax.sgd(0.1), 4), lambda: steadax.MultiSteps(steadax.sgd(0.1), 3)),
}


@pytest.mark.parametrize("name", sorted(UNEQUAL_PAIRS))
def test_unequal_when_anything_differs(name):
  make_a, make_b = UNEQUAL_PAIRS[name]
  a, b = make_a(), make_b()
  assert a != b and not a == b
  assert a != "adam" and a is not None


def test_callables_compare_by_identity():
  def schedule(count):
    return 0.1 / (1 + count)
  assert steadax.sgd(schedule) == steadax.sgd(schedule)
  assert steadax.sgd(schedule) != steadax.sgd(lambda count: 0.1 / (1 + count))


def test_nan_hyperparameter_equals_itself():
  # A NaN leaf (from a tree_map: the factories reject it) keeps equality reflexive.
  def nan_sgd():
    return jax.tree_util.tree_map(lambda x: float("nan"), steadax.sgd(0.1))
  assert nan_sgd() == nan_sgd()


def test_traced_leaves_equal_only_themselves_and_hash_works_under_jit():
  tx = steadax.adam(1e-3)

  @jax.jit
  def compare(tx_traced):
    assert hash(tx_traced) == hash(tx)  # the hash never reads a leaf
    assert tx_traced == tx_traced and tx_traced != tx
    return 0

  compare(tx)


def test_pytree_operations_keep_working():
  # Mapping leaves to booleans (eqx.partition) gives equal-structure objects; the halves compare.
  tx = steadax.chain(steadax.clip(1.0), steadax.adamw(_schedule(1e-3)))
  dynamic, static = eqx.partition(tx, eqx.is_array_like)
  assert eqx.combine(dynamic, static) == tx
  doubled = jax.tree_util.tree_map(lambda x: 2 * x, tx)
  assert doubled != tx and jax.tree_util.tree_map(lambda x: x / 2, doubled) == tx
  # Equal transformations share one compilation when passed as a static argument.
  calls = []

  def lr_of(tx):
    calls.append(1)
    return jnp.zeros(())

  step = jax.jit(lr_of, static_argnums=0)
  step(steadax.adam(1e-3))
  step(steadax.adam(1e-3))
  assert len(calls) == 1


def test_restored_hyperparameters_equal_the_code():
  # Leaves read back as numpy arrays (a checkpoint of the transformation) equal the code's floats.
  tx = steadax.inject_hyperparams(steadax.adamw)(learning_rate=0.5, weight_decay=0.25)
  restored = jax.tree_util.tree_map(np.asarray, tx)
  assert restored == tx


def _per_build_callables(obj):
  """Callables a factory call creates afresh (lambdas, closures, functools.partial): they compare by
  identity, so two builds holding them are unequal by design."""
  import dataclasses
  import functools
  import inspect
  if isinstance(obj, steadax.Module):
    for field in dataclasses.fields(obj):
      yield from _per_build_callables(getattr(obj, field.name))
  elif isinstance(obj, (tuple, list)):
    for x in obj:
      yield from _per_build_callables(x)
  elif isinstance(obj, dict):
    for x in obj.values():
      yield from _per_build_callables(x)
  elif isinstance(obj, functools.partial) or (
      inspect.isfunction(obj) and (obj.__name__ == "<lambda>" or obj.__closure__)
      and not _module_level(obj)):
    yield obj


def _module_level(fn) -> bool:
  """A function its module holds by name: one object, however many builds hold it (a factory
  decorated with ``shared_args`` is a closure over the function it wraps)."""
  import sys
  return getattr(sys.modules.get(fn.__module__), fn.__name__, None) is fn


def test_every_registry_entry_compares_by_value():
  from ._registry_run import ENTRIES

  per_build = []
  for entry in ENTRIES:
    a, b = entry.factory(), entry.factory()
    if list(_per_build_callables(a)):
      per_build.append(entry.name)
      assert a != b and a == a, entry.name
    else:
      assert a == b and hash(a) == hash(b), entry.name
    restored = jax.tree_util.tree_map(np.asarray, a)  # leaves read back from a checkpoint
    assert restored == a and hash(restored) == hash(a), entry.name
    assert jax.tree_util.tree_map(lambda x: np.asarray(x) * 2 + 1, a) != a, entry.name
  assert len(per_build) < len(ENTRIES) // 10, per_build  # the by-value case is the rule
