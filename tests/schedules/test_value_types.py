"""A schedule's value has Optax's type (issue 35 §2): a Python number where Optax returns one,
weakly typed where Optax's is, the same dtype, for every schedule and combinator steadax exports.

Each case is evaluated by steadax and by Optax 0.2.8 (under JAX's standard promotion, which Optax's
schedules need) at one count of every kind a user passes: a Python int, an int32 array, an int64
array (x64), a traced Python int and a traced int32 (``jax.eval_shape`` traces as ``jit`` does,
without compiling), and with the steadax schedule itself a ``jit`` argument (its numbers traced).
The suite runs in both x64 modes, so every case is checked in both. Concrete values must be equal
bit for bit.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import steadax

X64 = bool(jax.config.jax_enable_x64)
_SGDR = [dict(init_value=0.0, peak_value=1.0, warmup_steps=2, decay_steps=10),
         dict(init_value=0.5, peak_value=0.7, warmup_steps=0, decay_steps=12, end_value=0.1)]


def _join_of(lib):
  return lib.join_schedules([lib.constant_schedule(1.0), lib.linear_schedule(1.0, 0.0, 10)], [5])


# case -> build(lib): every schedule and combinator of steadax.schedules, with Python numbers (the
# common case) and with the array arguments whose types Optax keeps.
CASES = {
    "constant_int": lambda o: o.constant_schedule(5),
    "constant_float": lambda o: o.constant_schedule(0.5),
    "constant_np_float32": lambda o: o.constant_schedule(np.float32(0.5)),
    "constant_bfloat16": lambda o: o.constant_schedule(jnp.asarray(0.5, jnp.bfloat16)),
    "polynomial": lambda o: o.polynomial_schedule(1.0, 0.01, 2, 100, 5),
    "polynomial_no_transition": lambda o: o.polynomial_schedule(1.0, 0.01, 2, 0),
    "polynomial_float_steps": lambda o: o.polynomial_schedule(1.0, 0.0, 1, 10.0),
    "linear": lambda o: o.linear_schedule(1.0, 0.01, 100),
    "linear_jnp_float32": lambda o: o.linear_schedule(jnp.float32(1.0), 0.0, 10),
    "linear_bfloat16": lambda o: o.linear_schedule(jnp.asarray(1.0, jnp.bfloat16), 0.0, 10),
    "linear_np_float64": lambda o: o.linear_schedule(np.asarray(1.0, np.float64), 0.0, 10),
    "exponential": lambda o: o.exponential_decay(1.0, 10, 0.5),
    "exponential_staircase_end": lambda o: o.exponential_decay(1.0, 10, 0.5, 2, True, 0.1),
    "exponential_zero_rate": lambda o: o.exponential_decay(1.0, 10, 0.0),
    "cosine": lambda o: o.cosine_decay_schedule(1.0, 100, 0.1),
    "cosine_jnp_float32": lambda o: o.cosine_decay_schedule(jnp.float32(2.0), 100),
    "piecewise_constant": lambda o: o.piecewise_constant_schedule(1.0, {5: 0.1, 20: 0.5}),
    "piecewise_constant_none": lambda o: o.piecewise_constant_schedule(1.0),
    "piecewise_interpolate": lambda o: o.piecewise_interpolate_schedule("linear", 1.0, {5: 0.1, 20: 0.5}),
    "piecewise_interpolate_cosine": lambda o: o.piecewise_interpolate_schedule("cosine", 1.0, {10: 0.1}),
    "warmup_constant": lambda o: o.warmup_constant_schedule(0.0, 1.0, 10),
    "warmup_cosine": lambda o: o.warmup_cosine_decay_schedule(0.0, 1.0, 5, 100, 0.1),
    "warmup_cosine_arrays": lambda o: o.warmup_cosine_decay_schedule(
        0.0, jnp.float32(1.0), 5, 100, jnp.float32(0.1)),
    "warmup_exponential": lambda o: o.warmup_exponential_decay_schedule(0.0, 1.0, 5, 10, 0.5),
    "linear_onecycle": lambda o: o.linear_onecycle_schedule(100, 1.0),
    "cosine_onecycle": lambda o: o.cosine_onecycle_schedule(100, 1.0),
    "sgdr": lambda o: o.sgdr_schedule(_SGDR),
    "join": _join_of,
    "join_functions": lambda o: o.join_schedules([lambda c: 1.0, lambda c: 0.5], [5]),
    "join_one": lambda o: o.join_schedules([o.constant_schedule(0.5)], []),
}


def _kind(value) -> str:
  """A Python number's type, or an array's (or abstract value's) dtype and weakness."""
  if isinstance(value, (bool, int, float, complex)):
    return type(value).__name__
  if isinstance(value, np.generic):
    return f"numpy {value.dtype}"
  return f"{np.dtype(value.dtype).name}{' weak' if getattr(value, 'weak_type', False) else ''}"


def _counts():
  counts = {"python int": 7, "int32": jnp.asarray(7, jnp.int32)}
  if X64:
    counts["int64"] = jnp.asarray(7, jnp.int64)
  return counts


def _compare(case, ours, theirs, where):
  assert _kind(ours) == _kind(theirs), f"{case}, {where}: steadax {_kind(ours)}, Optax {_kind(theirs)}"


@pytest.mark.parametrize("case", sorted(CASES))
def test_value_types_and_bits_match_optax(case):
  ours = CASES[case](steadax)
  with jax.numpy_dtype_promotion("standard"):
    theirs = CASES[case](optax)
    expected = {}
    for name, count in _counts().items():
      expected[name] = theirs(count)
      expected[f"traced {name}"] = jax.eval_shape(theirs, count)
  for name, count in _counts().items():
    value = ours(count)
    _compare(case, value, expected[name], f"count {name}")
    np.testing.assert_array_equal(np.asarray(value), np.asarray(expected[name]),
                                  err_msg=f"{case}, count {name}: values differ")
    _compare(case, jax.eval_shape(ours, count), expected[f"traced {name}"], f"traced count {name}")
    # The schedule as a jit argument: its Python numbers arrive as weakly typed tracers, its arrays
    # as arrays, so the value keeps Optax's type (Optax's numbers are constants of the program).
    _compare(case, jax.eval_shape(lambda s, c: s(c), ours, count), expected[f"traced {name}"],
             f"schedule and count {name} traced")


@pytest.mark.parametrize("case", ["linear", "cosine", "piecewise_interpolate", "join", "constant_float"])
def test_wrapped_schedule_keeps_the_types(case):
  ours, theirs = steadax.WrappedSchedule(CASES[case](steadax)), optax.WrappedSchedule(CASES[case](optax))
  with jax.numpy_dtype_promotion("standard"):
    expected = theirs(theirs.update(theirs.init()))
  value = ours(ours.update(ours.init()))
  _compare(case, value, expected, "WrappedSchedule")
  np.testing.assert_array_equal(np.asarray(value), np.asarray(expected))


def test_the_issue_reproduction_runs():
  # Issue 35 §2, as written there (`import steadax as optax`): the carry stays bfloat16.
  f = lambda p, t: (p - steadax.constant_schedule(1e-2)(t) * p, None)  # noqa: E731
  with jax.numpy_dtype_promotion("standard"):
    out, _ = jax.lax.scan(f, jnp.ones(3, jnp.bfloat16), jnp.arange(3))
  assert out.dtype == jnp.bfloat16
  np.testing.assert_array_equal(np.asarray(out, np.float32),
                                np.asarray(jnp.full(3, 0.9697265625, jnp.bfloat16), np.float32))


def _scan_carry(lib_schedule, counts):
  f = lambda p, t: (p - lib_schedule(t) * p, None)  # noqa: E731
  return jax.eval_shape(lambda p: jax.lax.scan(f, p, counts)[0], jnp.ones(3, jnp.bfloat16))


@pytest.mark.parametrize("counts", ["arange", "int32"])
def test_bfloat16_parameters_times_a_schedule_in_scan_run_where_optax_runs(counts):
  # The issue's program for every case: steadax runs (the carry stays bfloat16) exactly where
  # Optax does, and fails (the carry type changes) where Optax's value is strongly float32 too.
  steps = jnp.arange(3) if counts == "arange" else jnp.arange(3, dtype=jnp.int32)
  differ = []
  for case, build in sorted(CASES.items()):
    outcome = {}
    for lib in (steadax, optax):
      with jax.numpy_dtype_promotion("standard"):
        try:
          outcome[lib.__name__] = np.dtype(_scan_carry(build(lib), steps).dtype).name
        except TypeError as error:
          outcome[lib.__name__] = "fails" if "carry" in str(error) else f"other error: {error}"
    if outcome["steadax"] != outcome["optax"]:
      differ.append(f"{case}: {outcome}")
  assert not differ, "\n".join(differ)
  with jax.numpy_dtype_promotion("standard"):
    assert _scan_carry(steadax.cosine_decay_schedule(1e-2, 10), steps).dtype == jnp.bfloat16
    assert _scan_carry(steadax.warmup_stable_decay_schedule(
        1e-2, total_steps=10, decay_fraction=0.2), steps).dtype == jnp.bfloat16


def test_constant_returns_its_value_itself():
  for value in (5, 0.5, np.float32(0.5), jnp.float32(0.5), jnp.asarray(0.5, jnp.bfloat16)):
    assert steadax.constant_schedule(value)(3) is value


def test_inside_an_optimizer_the_policy_casts_the_value():
  # The optimizer's state and updates keep their exact types whatever the value's type (a Python
  # float, a weak float64 under x64, a strong float32): the dtype policy casts it as before.
  params = {"w": jnp.ones(3, jnp.bfloat16), "b": jnp.ones(2, jnp.float32)}
  for schedule in (steadax.constant_schedule(0.1), steadax.cosine_decay_schedule(0.1, 10),
                   steadax.piecewise_interpolate_schedule("linear", 0.1, {5: 0.5}),
                   steadax.warmup_stable_decay_schedule(0.1, total_steps=10, decay_fraction=0.5)):
    tx = steadax.adamw(schedule)
    state = tx.init(params)
    updates, new_state = jax.jit(tx.update)(params, state, params)
    assert jax.tree.map(lambda u: u.dtype, updates) == {"w": jnp.bfloat16, "b": jnp.float32}
    assert jax.tree.map(lambda s: (s.dtype, s.weak_type), new_state) == \
        jax.tree.map(lambda s: (s.dtype, s.weak_type), state)
