"""Core v2: declared fields, structure independent of values, the per-leaf primitive, roles, strict key."""

from __future__ import annotations

from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax
from steadax._core._transformation import Transformation
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
  # Adam's first step is g / (|g| + eps) up to float32 rounding (Optax's arithmetic: (1 - b1) g over
  # the float32 bias correction 1 - b1, 4e-6 relative), computed in float32 and not rounded to
  # bfloat16 on the way (a bfloat16 rounding of 0.6596 is off by ~1e-3).
  g = np.float32(grads["w"][0].astype(jnp.float32))
  np.testing.assert_allclose(np.asarray(out), [g / (abs(g) + np.float32(0.5))], rtol=2e-5)


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


# --------------------------------------------------------------------------------------------------
# Integer and boolean parameters (docs/contract.md, "Integer parameters"): accepted at init as Optax
# accepts them; never optimised.


def _with_int_leaf(params):
  """The entry's problem parameters plus an int32 step counter, as a Flax TrainState may hold."""
  return {**params, "step": jnp.asarray(7, jnp.int32)}


def _int_leaf_grads(params, kind):
  grads = jax.grad(lambda p: jnp.zeros([], jnp.float32) + sum(
      jnp.sum(x.astype(jnp.float32) ** 2) for k, x in p.items() if k != "step"), allow_int=True)(params)
  if kind == "int32":
    grads = {**grads, "step": jnp.asarray(1000, jnp.int32)}
  return grads


def _abstract(tree):
  return [(tuple(np.shape(x)), x.dtype, bool(getattr(x, "weak_type", False)))
          for x in jax.tree_util.tree_leaves(tree)]


@pytest.mark.x32_only  # integer-leaf handling does not depend on the x64 flag (the problems' float
# leaves are explicitly float32); the matrix covers every entry under x64. ~45 s per pass.
@pytest.mark.parametrize("grad_kind", ["float0", "int32"])
@pytest.mark.parametrize("entry", ENTRIES, ids=entry_ids(ENTRIES))
def test_registry_entry_accepts_an_integer_parameter(entry, grad_kind):
  """Every registry entry: init with an int32 leaf among float leaves works (from abstract values);
  update with the gradient Flax gives that leaf (float0, or an integer one) keeps the state's
  types and gives the int leaf an int32 update; ``apply_updates`` leaves it unchanged. A
  transformation that cannot handle integer leaves must say so in a TypeError naming the leaf's
  path and dtype (``requires_float = True``), not fail somewhere in its maths."""
  tx = entry.factory()
  params = _with_int_leaf(entry.problem.init())
  grads = _int_leaf_grads(params, grad_kind)
  extras = entry.extra_args(entry.problem.loss, params, grads) if entry.extra_args else {}

  def step(params, grads):
    state = tx.init(params)
    updates, new_state = tx.update(grads, state, params, **extras)
    return state, updates, new_state, steadax.apply_updates(params, updates)["step"]

  try:
    state, updates, new_state, step_after = jax.eval_shape(step, params, grads)
  except ContractError:
    raise
  except TypeError as e:
    if "['step']" in str(e) and "int32" in str(e):
      return  # a clear refusal naming the path
    raise
  assert _abstract(new_state) == _abstract(state)
  assert updates["step"].dtype == jnp.int32 and step_after.dtype == jnp.int32
  # The value: DCE leaves a tiny program (only what the int leaf's update depends on).
  after = jax.jit(lambda p, g: step(p, g)[3])(params, grads)
  assert int(after) == 7


def test_integer_and_boolean_parameters_get_optax_state_and_no_change():
  """State as Optax creates it (accumulators in the parameter's dtype); float0 and integer
  gradients give a zero update in the parameter's dtype, so the leaf never changes."""
  import optax

  params = {"w": jnp.ones(2, jnp.float32), "step": jnp.asarray(3, jnp.int32), "flag": jnp.asarray(True)}
  for make in (lambda o: o.adam(0.1), lambda o: o.sgd(0.1, momentum=0.9)):
    state = make(steadax).init(params)
    reference = make(optax).init(params)
    assert ([x.dtype for x in jax.tree_util.tree_leaves(state)]
            == [x.dtype for x in jax.tree_util.tree_leaves(reference)])
    for grad in (jax.grad(lambda p: jnp.sum(p["w"] ** 2), allow_int=True)(params),
                 {"w": jnp.ones(2, jnp.float32), "step": jnp.asarray(9, jnp.int32), "flag": jnp.asarray(True)}):
      updates, new_state = make(steadax).update(grad, state, params)
      assert updates["step"].dtype == jnp.int32 and int(updates["step"]) == 0
      assert updates["flag"].dtype == jnp.bool_ and not bool(updates["flag"])
      after = steadax.apply_updates(params, updates)
      assert int(after["step"]) == 3 and bool(after["flag"])
      assert [x.dtype for x in jax.tree_util.tree_leaves(new_state)] == [x.dtype for x in jax.tree_util.tree_leaves(state)]


def test_float_gradient_for_an_integer_parameter_raises_naming_the_path():
  params = {"w": jnp.ones(2, jnp.float32), "step": jnp.asarray(3, jnp.int32)}
  tx = steadax.scale_by_adam()
  grads = {"w": jnp.ones(2, jnp.float32), "step": jnp.asarray(1.0, jnp.float32)}
  with pytest.raises(TypeError, match=r"scale_by_adam: the parameter at \['step'\] is int32 but its gradient is float32"):
    tx.update(grads, tx.init(params), params)


def test_apply_updates_with_a_float0_update_keeps_the_parameter():
  params = {"w": jnp.ones(2, jnp.float32), "step": jnp.asarray(3, jnp.int32)}
  grads = jax.grad(lambda p: jnp.sum(p["w"]), allow_int=True)(params)
  after = steadax.apply_updates(params, grads)
  assert after["step"].dtype == jnp.int32 and int(after["step"]) == 3
  np.testing.assert_allclose(after["w"], 2.0)


def test_float0_update_passes_through_a_chain_eagerly():
  """A pass-through stage (masked, identity) hands a float0 update on unchanged: the contract does
  not try to cast it to the integer parameter's dtype (which failed eagerly)."""
  params = {"w": jnp.ones(2, jnp.float32), "step": jnp.asarray(3, jnp.int32)}
  grads = jax.grad(lambda p: jnp.sum(p["w"] ** 2), allow_int=True)(params)
  for tx in (steadax.chain(steadax.identity(), steadax.adam(0.1)),
             steadax.masked(steadax.adam(0.1), {"w": True, "step": False})):
    updates, _ = tx.update(grads, tx.init(params), params)
    after = steadax.apply_updates(params, updates)
    assert after["step"].dtype == jnp.int32 and int(after["step"]) == 3
    assert float(after["w"][0]) < 1.0


def test_state_constructors_keep_shape_dtype_and_sharding_of_any_array_like_leaf():
  from steadax._core._roles import role_zeros
  from steadax._core._tree import copy_like, full_like, zeros_like

  device = jax.devices()[0]
  sharding = jax.sharding.SingleDeviceSharding(device)
  sds = jax.ShapeDtypeStruct((2, 3), jnp.bfloat16, sharding=sharding)
  tree = {"a": jax.device_put(jnp.ones(3, jnp.float32), device), "s": sds, "n": np.ones(2, np.float32),
          "none": None}
  for built in (zeros_like(tree), role_zeros(tree, accumulator(), steadax.scale_by_adam()),
                full_like(tree, 2.0)):
    assert built["none"] is None
    assert built["s"].shape == (2, 3) and built["s"].dtype == jnp.bfloat16 and built["s"].sharding == sharding
    assert built["a"].sharding == tree["a"].sharding and built["n"].dtype == jnp.float32
  assert copy_like({"a": tree["a"]})["a"].sharding == tree["a"].sharding
  # From abstract values (jax.eval_shape) too, and under jit.
  out = jax.eval_shape(lambda t: zeros_like(t, jnp.float32), {"s": sds})
  assert out["s"].shape == (2, 3) and out["s"].dtype == jnp.float32
  assert jax.jit(lambda t: role_zeros(t, accumulator(real=True), None))(
      {"c": jnp.ones(2, jnp.complex64)})["c"].dtype == jnp.float32


def test_complex_hyperparameter_keeps_its_imaginary_part():
  """``scale(1j)`` rotates complex updates as in Optax (the per-dtype scalars used to keep only the
  real part: a zero update); the same factor on a real parameter raises instead of dropping it."""
  tx = steadax.scale(1j)
  g = jnp.asarray([1.0 + 2.0j, -0.5j], jnp.complex64)
  out, _ = tx.update(g, tx.init(g))
  np.testing.assert_allclose(out, 1j * np.asarray(g))
  assert out.dtype == jnp.complex64
  with pytest.raises(ContractError, match="complex"):
    tx.update(jnp.ones(2, jnp.float32), tx.init(jnp.zeros(2)))
  # A complex number with no imaginary part is an ordinary real factor.
  out, _ = steadax.scale(2 + 0j).update(jnp.ones(2, jnp.float32), steadax.EmptyState())
  assert out.dtype == jnp.float32 and float(out[0]) == 2.0
