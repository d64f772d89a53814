"""Core v2: declared fields, structure independent of values, the per-leaf primitive, roles, strict key."""

from __future__ import annotations

from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax
from steadax._core._base import Transformation
from steadax._core._contract import ContractError
from steadax._core._leafwise import Scalars
from steadax._core._module import Module, hyper_field, static_field
from steadax._core._roles import COUNTER, accumulator, state_roles
from tests.conformance.registry import all_entries, entry_ids

ENTRIES = all_entries()


@pytest.mark.x32_only
@pytest.mark.parametrize("entry", ENTRIES, ids=entry_ids(ENTRIES))
def test_structure_does_not_depend_on_values(entry):
  tx = entry.factory()
  treedef = jax.tree_util.tree_structure(tx)
  for fill in (False, None, 0, object()):
    mapped = jax.tree_util.tree_map(lambda _: fill, tx)
    if fill is None:
      continue  # None leaves vanish in jax.tree_util; eqx.partition below covers them
    assert jax.tree_util.tree_structure(mapped) == treedef
  dynamic, static = eqx.partition(tx, eqx.is_array)
  combined = eqx.combine(dynamic, static)
  assert jax.tree_util.tree_structure(combined) == treedef
  paths = [p for p, _ in jax.tree_util.tree_flatten_with_path(tx)[0]]
  rebuilt = jax.tree_util.tree_unflatten(treedef, [0.0] * len(paths))
  assert [p for p, _ in jax.tree_util.tree_flatten_with_path(rebuilt)[0]] == paths


def test_undeclared_field_raises_at_class_definition():
  with pytest.raises(TypeError, match="declare the field"):
    class Bad(Module):  # noqa: F841
      lr: float = 0.1


def test_plain_callable_in_hyper_field_is_no_leaf_and_jit_works():
  tx = steadax.sgd(lambda count: 0.1 * jnp.ones([], jnp.float32))
  assert all(not callable(l) for l in jax.tree_util.tree_leaves(tx))
  params = jnp.ones(2)

  @jax.jit
  def step(tx, params):
    return tx.update(params, tx.init(params), params)[0]

  np.testing.assert_allclose(step(tx, params), -0.1 * np.ones(2), rtol=1e-6)


def test_validation_runs_when_built_not_when_filtered():
  with pytest.raises(ValueError, match="scale_by_adam: b1"):
    steadax.scale_by_adam(b1=1.5)
  with pytest.raises(ValueError, match="scale_by_adam: b1"):
    steadax.scale_by_adam().replace(b1=1.5)
  tx = steadax.scale_by_adam()
  # Filtered and traced values are never validated.
  jax.tree_util.tree_map(lambda _: 7.0, tx)
  jax.jit(lambda t: t.b1)(tx)


def test_strict_mode_is_part_of_the_trace_cache_key():
  traces = []

  @jax.jit
  def f(x):
    traces.append(steadax.is_strict())
    return x

  with steadax.strict_mode(False):
    f(1.0)
  with steadax.strict_mode(True):
    f(1.0)
  assert traces == [False, True]


@state_roles(count=COUNTER, mu=accumulator())
class _TraceState(NamedTuple):
  count: jax.Array
  mu: Any


class _Trace(Transformation):
  name = "trace_for_test"
  requires_float = False  # leafwise gives integer leaves a zero update
  State = _TraceState
  decay: Any = hyper_field(0.5)
  mutation: str = static_field("")

  def update_fn(self, updates, state, params=None, **extra_args):
    def leaf(k, g, m):
      m = k.decay * m + g
      if self.mutation == "float16":
        return m.astype(jnp.float16), m
      if self.mutation == "real":
        return jnp.real(m), m
      return m, m

    out, mu = self.leafwise(leaf, updates, state.mu, params=params,
                            scalars=lambda dt: Scalars(decay=self.decay))
    return out, _TraceState(steadax.safe_increment(state.count), mu)


def test_leafwise_update_in_parameter_dtype_with_compute_precision():
  params = {"w": jnp.ones(1, jnp.float32)}
  grads = {"w": jnp.asarray([0.96938413], jnp.bfloat16)}
  tx = steadax.scale_by_adam(eps=0.5)
  out = tx.update(grads, tx.init(params), params)[0]["w"]
  assert out.dtype == jnp.float32
  # Adam's first step is g / (|g| + eps), computed in float32 and not rounded to bfloat16 on the
  # way (a bfloat16 rounding of 0.6596 is off by ~1e-3).
  g = np.float32(grads["w"][0].astype(jnp.float32))
  np.testing.assert_allclose(np.asarray(out), [g / (abs(g) + np.float32(0.5))], rtol=1e-6)


def test_leafwise_rejects_rounding_inside_the_leaf_function():
  tx = _Trace(mutation="float16")
  params = {"w": jnp.ones(2, jnp.float32)}
  with pytest.raises(ContractError, match="trace_for_test.*float16"):
    tx.update(params, tx.init(params), params)


def test_leafwise_rejects_dropped_imaginary_part():
  tx = _Trace(mutation="real")
  params = {"z": jnp.ones(2, jnp.complex64)}
  with pytest.raises(ContractError, match="trace_for_test"):
    tx.update(params, tx.init(params), params)


def test_complex_update_for_real_parameter_raises_in_contract():
  tx = steadax.stateless(lambda u, p: jax.tree_util.tree_map(lambda x: x.astype(jnp.complex64), u))
  params = jnp.ones(2, jnp.float32)
  with pytest.raises(ContractError, match="complex"):
    tx.update(params, tx.init(params), params)


def test_unexpected_update_dtype_raises_in_strict_mode():
  tx = steadax.stateless(lambda u, p: jax.tree_util.tree_map(lambda x: x.astype(jnp.float16), u))
  params = jnp.ones(2, jnp.float32)
  with pytest.raises(ContractError, match="float16"):
    tx.update(params, tx.init(params), params)
  with steadax.strict_mode(False):
    assert tx.update(params, tx.init(params), params)[0].dtype == jnp.float32


def test_roles_check_init():
  class _BadInit(_Trace):
    name = "bad_init"

    def init_fn(self, params):
      return _TraceState(jnp.zeros([], jnp.int32), jax.tree_util.tree_map(
          lambda p: jnp.zeros(p.shape, jnp.float16), params))

  with pytest.raises(ContractError, match=r"bad_init: _TraceState.mu at \['w'\]"):
    _BadInit().init({"w": jnp.ones(2, jnp.float32)})
  state = _Trace().init({"w": jnp.ones(2, jnp.bfloat16)})
  assert state.count.dtype == jnp.int32 and state.mu["w"].dtype == jnp.bfloat16


def test_integer_gradient_leaves_are_not_optimised():
  tx = _Trace()
  params = {"w": jnp.ones(2, jnp.float32), "step": jnp.zeros([], jnp.int32)}
  state = tx.init(params)
  grads = {"w": jnp.ones(2, jnp.float32), "step": jnp.zeros([], jnp.int32)}
  out, new_state = tx.update(grads, state, params)
  assert out["step"].dtype == jnp.int32 and int(out["step"]) == 0
  assert new_state.mu["step"].dtype == jnp.int32
