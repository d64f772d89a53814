"""Schedules: Optax's values bit for bit, leaves vs static, argument checks (value types:
test_value_types.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import steadax

# Boundaries of the cases below (0, 5, 10, 20, 30, 100 ...) and counts past every end.
COUNTS = np.array(
    [0, 1, 2, 3, 4, 5, 6, 9, 10, 11, 12, 15, 19, 20, 21, 25, 29, 30, 31, 49, 50, 51, 70, 85, 99,
     100, 101, 150, 1000, 2**31 - 1], np.int32)

_SGDR = [
    dict(init_value=0.0, peak_value=1.0, warmup_steps=2, decay_steps=20),
    dict(init_value=0.5, peak_value=0.7, warmup_steps=0, decay_steps=30, end_value=0.1, exponent=0.5),
]

CASES = {
    "constant": ("constant_schedule", dict(value=0.3)),
    "polynomial": ("polynomial_schedule",
                   dict(init_value=1.0, end_value=0.01, power=2, transition_steps=100, transition_begin=5)),
    "polynomial_sqrt": ("polynomial_schedule",
                        dict(init_value=0.1, end_value=1.0, power=0.5, transition_steps=30)),
    "polynomial_no_transition": ("polynomial_schedule",
                                 dict(init_value=1.0, end_value=0.0, power=1, transition_steps=0)),
    "linear": ("linear_schedule", dict(init_value=0.5, end_value=2.0, transition_steps=30)),
    "linear_negative_begin": ("linear_schedule",
                              dict(init_value=0.5, end_value=2.0, transition_steps=30, transition_begin=-3)),
    "linear_fractional_steps": ("linear_schedule",
                                dict(init_value=1.0, end_value=0.0, transition_steps=2.5, transition_begin=1)),
    "exponential": ("exponential_decay", dict(init_value=1.0, transition_steps=10, decay_rate=0.5)),
    "exponential_staircase_begin_end": (
        "exponential_decay",
        dict(init_value=1.0, transition_steps=10, decay_rate=0.5, transition_begin=5, staircase=True,
             end_value=0.05)),
    "exponential_end_value": ("exponential_decay",
                              dict(init_value=1.0, transition_steps=3, decay_rate=0.7, end_value=0.2)),
    "exponential_growth_capped": ("exponential_decay",
                                  dict(init_value=0.1, transition_steps=7, decay_rate=1.5, end_value=0.9)),
    "exponential_zero_rate": ("exponential_decay",
                              dict(init_value=0.1, transition_steps=7, decay_rate=0.0, end_value=0.5)),
    "exponential_no_transition": ("exponential_decay",
                                  dict(init_value=0.3, transition_steps=0, decay_rate=0.5)),
    "exponential_negative_staircase": ("exponential_decay",
                                       dict(init_value=1.0, transition_steps=10, decay_rate=-0.5, staircase=True)),
    "cosine": ("cosine_decay_schedule", dict(init_value=2.0, decay_steps=30)),
    "cosine_alpha_exponent": ("cosine_decay_schedule",
                              dict(init_value=2.0, decay_steps=30, alpha=0.1, exponent=1.5)),
    "piecewise_constant": ("piecewise_constant_schedule",
                           dict(init_value=1.0, boundaries_and_scales={20: 0.5, 10: 0.1, 100: 2.0})),
    "piecewise_constant_none": ("piecewise_constant_schedule", dict(init_value=0.7)),
    "piecewise_linear": ("piecewise_interpolate_schedule",
                         dict(interpolate_type="linear", init_value=1.0,
                              boundaries_and_scales={10: 0.1, 20: 0.5, 100: 2.0})),
    "piecewise_cosine_zero_boundary": ("piecewise_interpolate_schedule",
                                       dict(interpolate_type="cosine", init_value=1.0,
                                            boundaries_and_scales={0: 3.0, 10: 0.1, 20: 0.5})),
    "piecewise_linear_empty": ("piecewise_interpolate_schedule",
                               dict(interpolate_type="linear", init_value=0.4, boundaries_and_scales={})),
    "linear_onecycle": ("linear_onecycle_schedule", dict(transition_steps=100, peak_value=1.0)),
    "cosine_onecycle": ("cosine_onecycle_schedule",
                        dict(transition_steps=100, peak_value=2.0, pct_start=0.2, div_factor=10.0)),
    "warmup_constant": ("warmup_constant_schedule", dict(init_value=0.0, peak_value=1.0, warmup_steps=10)),
    "warmup_cosine": ("warmup_cosine_decay_schedule",
                      dict(init_value=0.0, peak_value=1.0, warmup_steps=10, decay_steps=100, end_value=0.1,
                           exponent=2.0)),
    "warmup_cosine_zero_peak": ("warmup_cosine_decay_schedule",
                                dict(init_value=0.1, peak_value=0.0, warmup_steps=10, decay_steps=100,
                                     end_value=0.1)),
    "warmup_exponential": ("warmup_exponential_decay_schedule",
                           dict(init_value=0.0, peak_value=1.0, warmup_steps=10, transition_steps=5,
                                decay_rate=0.8, transition_begin=3, staircase=True, end_value=0.2)),
    "sgdr": ("sgdr_schedule", dict(cosine_kwargs=_SGDR)),
}


def _optax_values(name, kwargs, counts):
  with jax.numpy_dtype_promotion("standard"):
    schedule = getattr(optax, name)(**kwargs)
    return np.array([np.float64(schedule(jnp.asarray(c))) for c in counts])


# Where Optax's own arithmetic is wrong, under jit: XLA divides by multiplying with 1 / T, so
# Optax's ``1 - t / T`` ends a hair below 0 at t = T. A fractional power of it is NaN
# (polynomial_sqrt) and a linear schedule ends below its end value (-1.5e-8 for 0.0). steadax keeps
# the fraction at 0 there; every other value is Optax's, bit for bit.
OPTAX_NEGATIVE_FRACTION_UNDER_JIT = {"polynomial_sqrt", "linear_fractional_steps"}
# Counts for the op-by-op forms (each count is a call): every case's boundaries and ends.
EAGER_COUNTS = [0, 2, 5, 9, 10, 11, 20, 25, 30, 50, 85, 100, 101, 2**31 - 1]


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_optax_bit_for_bit(case):
  name, kwargs = CASES[case]
  ours = getattr(steadax, name)(**kwargs)
  with jax.numpy_dtype_promotion("standard"):
    theirs = getattr(optax, name)(**kwargs)
    forms = {
        "Python int": lambda s: [s(c) for c in EAGER_COUNTS],
        "int32 array": lambda s: [s(jnp.asarray(c, jnp.int32)) for c in EAGER_COUNTS],
        "jit(vmap) over int32 counts": lambda s: [jax.jit(jax.vmap(s))(jnp.asarray(COUNTS))],
    }
    expected = {form: run(theirs) for form, run in forms.items()}
  for form, run in forms.items():
    got = np.concatenate([np.ravel(np.asarray(v)) for v in run(ours)])
    want = np.concatenate([np.ravel(np.asarray(v)) for v in expected[form]])
    if form.startswith("jit") and case in OPTAX_NEGATIVE_FRACTION_UNDER_JIT:
      # Whether XLA rewrites the division depends on its flags: where the values differ, steadax's
      # is the end value exactly and Optax's NaN or a hair past it.
      end = kwargs["end_value"]
      wrong = got != want
      np.testing.assert_array_equal(got[wrong], end, err_msg=f"{case} ({form})")
      assert np.all(np.isnan(want[wrong]) | (np.abs(want[wrong] - end) < 1e-6)), (case, want[wrong])
      got, want = got[~wrong], want[~wrong]
    # Bit for bit (assert_array_equal also tells -0.0 from 0.0 apart only through the sign check).
    np.testing.assert_array_equal(got, want, err_msg=f"{case} ({form}) differs from Optax")
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=f"{case} ({form}): sign of 0")


@pytest.mark.parametrize("case", ["warmup_cosine", "piecewise_linear", "exponential_staircase_begin_end",
                                  "sgdr", "linear_fractional_steps"])
def test_scalar_call_forms_agree(case):
  name, kwargs = CASES[case]
  schedule = getattr(steadax, name)(**kwargs)
  jitted = jax.jit(lambda s, c: s(c))
  batched = np.asarray(jax.vmap(schedule)(jnp.asarray(COUNTS)))
  for i in (0, 9, 10, 11, len(COUNTS) - 1):
    count = int(COUNTS[i])
    python = schedule(count)
    # The schedule as a jit argument: its Python numbers are traced (computed in float32 where
    # Python computed in float64), so the last bit may differ.
    traced = jitted(schedule, jnp.asarray(count, jnp.int32))
    np.testing.assert_allclose([float(python), float(traced)], [float(batched[i])] * 2, rtol=1e-6, atol=1e-8,
                               err_msg=f"{case} at {count}")


def test_float_count_and_weak_leaves_inside_jit():
  schedule = steadax.warmup_cosine_decay_schedule(0.0, 1.0, 10, 100)
  # A Python-float leaf reaches jit as a weak float (float64 under x64); with an int32 count the
  # value is float32, as Optax's (its linear warmup's `count / transition_steps` is).
  out = jax.jit(lambda s: s(jnp.asarray(50, jnp.int32)))(schedule)
  assert out.dtype == jnp.float32
  np.testing.assert_allclose(float(schedule(jnp.asarray(50.0, jnp.float32))), float(out), rtol=1e-6)


def _trace_counter():
  traces = []

  @jax.jit
  def evaluate(schedule, count):
    traces.append(1)
    return schedule(count)

  return evaluate, traces


@pytest.mark.parametrize("build", [
    lambda v: steadax.warmup_cosine_decay_schedule(0.0, v, 10, 100, end_value=v / 10),
    lambda v: steadax.exponential_decay(v, 10, v, staircase=True),
    lambda v: steadax.piecewise_constant_schedule(v, {10: v, 20: 0.5}),
    lambda v: steadax.sgdr_schedule([dict(init_value=0.0, peak_value=v, warmup_steps=2, decay_steps=20)] * 2),
    lambda v: steadax.join_schedules([steadax.constant_schedule(v), steadax.linear_schedule(v, 0.0, 20)], [3]),
    lambda v: steadax.cosine_onecycle_schedule(50, v),
], ids=["warmup_cosine", "exponential", "piecewise_constant", "sgdr", "join", "onecycle"])
def test_new_values_do_not_recompile(build):
  evaluate, traces = _trace_counter()
  count = jnp.asarray(12, jnp.int32)
  first = evaluate(build(0.5), count)
  second = evaluate(build(0.25), count)
  assert len(traces) == 1
  assert float(first) != float(second)
  np.testing.assert_allclose(float(second), float(build(0.25)(count)), rtol=1e-6, atol=1e-8)


def test_static_boundaries_recompile():
  evaluate, traces = _trace_counter()
  count = jnp.asarray(12, jnp.int32)
  evaluate(steadax.piecewise_constant_schedule(1.0, {10: 0.5}), count)
  evaluate(steadax.piecewise_constant_schedule(1.0, {10: 0.5}), count)  # equal boundaries: cached
  evaluate(steadax.piecewise_constant_schedule(1.0, {11: 0.5}), count)
  assert len(traces) == 2


def test_schedule_built_from_traced_values():
  @jax.jit
  def build_and_evaluate(peak, end):
    return steadax.warmup_cosine_decay_schedule(0.0, peak, 10, 100, end_value=end)(jnp.asarray(60, jnp.int32))

  expected = _optax_values("warmup_cosine_decay_schedule",
                           dict(init_value=0.0, peak_value=0.8, warmup_steps=10, decay_steps=100,
                                end_value=0.2), [60])
  np.testing.assert_allclose(float(build_and_evaluate(jnp.float32(0.8), jnp.float32(0.2))), expected[0],
                             rtol=1e-6)
  # A zero peak gives alpha = 0 (no division by zero) on the traced path too.
  assert float(build_and_evaluate(jnp.float32(0.0), jnp.float32(0.2))) == 0.0


def test_join_with_plain_callables_has_one_dtype():
  schedule = steadax.join_schedules([lambda c: 0.5, steadax.linear_schedule(1.0, 0.0, 10)], [4])
  values = jax.vmap(schedule)(jnp.arange(8, dtype=jnp.int32))
  assert values.dtype == jnp.float32  # the linear piece's, with an int32 count (as in Optax)
  np.testing.assert_allclose(np.asarray(values), [0.5] * 4 + [1.0, 0.9, 0.8, 0.7], rtol=1e-6)


def test_large_counts_saturate_without_overflow():
  top = jnp.asarray(np.iinfo(np.int32).max, jnp.int32)
  assert float(steadax.linear_schedule(1.0, 0.25, 100, transition_begin=10)(top)) == 0.25
  assert float(steadax.cosine_decay_schedule(1.0, 100, alpha=0.5)(top)) == 0.5
  assert float(steadax.warmup_cosine_decay_schedule(0.0, 1.0, 10, 100, end_value=0.1)(top)) == \
      pytest.approx(0.1, rel=1e-6)


def test_fractional_powers_are_finite_at_the_end_under_jit():
  # XLA may divide by multiplying with the reciprocal; 1 - T * (1 / T) can be slightly negative.
  for steps in (3, 7, 2.5, 10):
    schedule = steadax.polynomial_schedule(1.0, 0.0, 0.5, steps)
    values = jax.jit(jax.vmap(schedule))(jnp.arange(14, dtype=jnp.int32))
    assert np.all(np.isfinite(np.asarray(values))), steps
    assert np.all(np.asarray(values) >= 0.0), steps


def test_cosine_fractional_exponent_is_finite_at_the_end():
  schedule = steadax.cosine_decay_schedule(1.0, 7, exponent=0.3)
  values = jax.vmap(schedule)(jnp.arange(12, dtype=jnp.int32))
  assert np.all(np.isfinite(np.asarray(values)))
  assert float(values[-1]) == 0.0


@pytest.mark.parametrize("make, match", [
    (lambda: steadax.cosine_decay_schedule(1.0, 0), "cosine_decay_schedule: decay_steps"),
    (lambda: steadax.warmup_cosine_decay_schedule(0.0, 1.0, 10, 10), "decay_steps .* must exceed warmup_steps"),
    (lambda: steadax.piecewise_constant_schedule(1.0, {10: -0.5}), r"boundaries_and_scales\[10\]"),
    (lambda: steadax.piecewise_interpolate_schedule("linear", 1.0, {5: 1.0, 10: -0.1}),
     r"piecewise_interpolate_schedule: boundaries_and_scales\[10\]"),
    (lambda: steadax.piecewise_interpolate_schedule("quadratic", 1.0, {5: 1.0}), "interpolate_type"),
    (lambda: steadax.join_schedules([steadax.constant_schedule(1.0)] * 3, [10, 5]), "sorted"),
    (lambda: steadax.join_schedules([steadax.constant_schedule(1.0)] * 3, [10]), "len\\(schedules\\) - 1"),
    (lambda: steadax.join_schedules([], []), "must not be empty"),
    (lambda: steadax.exponential_decay(1.0, 10, -0.5), "exponential_decay: decay_rate"),
    (lambda: steadax.linear_onecycle_schedule(0, 1.0), "linear_onecycle_schedule: transition_steps"),
    (lambda: steadax.cosine_onecycle_schedule(10, 1.0, div_factor=0.0), "cosine_onecycle_schedule: div_factor"),
    (lambda: steadax.sgdr_schedule([]), "at least one cycle"),
    (lambda: steadax.sgdr_schedule([dict(init_value=0.0, peak_value=1.0, warmup_steps=1)]), "decay_steps"),
])
def test_bad_arguments_raise_value_errors(make, match):
  with pytest.raises(ValueError, match=match):
    make()


def test_step_arguments_must_be_concrete_numbers():
  with pytest.raises(TypeError, match="linear_schedule|polynomial_schedule: transition_steps"):
    steadax.linear_schedule(1.0, 0.0, "10")
  with pytest.raises(TypeError, match="join_schedules: schedules\\[1\\] must be callable"):
    steadax.join_schedules([steadax.constant_schedule(1.0), 0.5], [3])

  @jax.jit
  def traced_steps(steps):
    return steadax.cosine_decay_schedule(1.0, steps)(0)

  with pytest.raises(TypeError, match="cosine_decay_schedule: decay_steps .* not a traced value"):
    traced_steps(10)


def test_namespace_and_top_level_agree():
  names = [n for n in dir(optax.schedules) if not n.startswith("_")]
  for name in names:
    assert getattr(steadax.schedules, name) is not None, name
    if hasattr(optax, name):
      assert getattr(steadax, name) is getattr(steadax.schedules, name), name
