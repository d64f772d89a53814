"""warmup_stable_decay_schedule (issue 34 §2): the papers' formulas point by point, cycles and
continuation from a checkpoint, sweeping the cooldown fraction in one program, types, errors."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax

X64 = bool(jax.config.jax_enable_x64)


def _cooldown(shape, x):
  """The cooldown function f of Hägele et al. 2024, Section 3, at x = (n - (N - N_decay)) / N_decay:
  linear 1 - x, (1-sqrt) 1 - sqrt(x); cosine (1 + cos(pi x)) / 2 (SGDR's half period, as MaxText's
  and transformers' WSD cooldowns)."""
  return {"linear": 1 - x, "1-sqrt": 1 - math.sqrt(x), "cosine": 0.5 * (1 + math.cos(math.pi * x))}[shape]


def reference(n, *, peak, warmup, total, decay, shape, init=0.0, end=0.0, cycles=()):
  """The schedule at step n, in float64, written from the papers' definitions.

  Hägele et al. 2024 (arXiv:2405.18392), Section 3: eta(n) = eta_max * n / N_warmup for n <
  N_warmup; eta_max for N_warmup <= n <= N - N_decay; f(n, N, N_decay) * eta_max for n > N - N_decay
  (0 at n = N), with the (1-sqrt) cooldown f = 1 - sqrt((n - (N - N_decay)) / N_decay). MiniCPM's WSD
  (Hu et al. 2024, Section 4) is the same three phases. The warmup starts at ``init`` and the
  cooldown ends at ``end`` (0 in the paper: eta = end + (eta_max - end) * f). Each further cycle
  (rewarmup R, stable S, decay D, peak, end) takes the steps from the end of the previous one on,
  re-warming linearly from the previous end value (at once to its peak when R = 0).
  """
  if cycles and n >= total:
    return _later_cycles(n, peak, end, total, cycles, shape)
  if n < warmup:
    return init + (peak - init) * n / warmup
  if n <= total - decay:
    return peak
  if n <= total:
    x = (n - (total - decay)) / decay
    return end + (peak - end) * _cooldown(shape, x)
  return end


def _later_cycles(n, peak, end, total, cycles, shape):
  start, previous_end = total, end
  for i, c in enumerate(cycles):
    rewarm, stable, d = c["rewarmup_steps"], c["stable_steps"], c["decay_steps"]
    c_peak, c_end = c.get("peak_value", peak), c.get("end_value", end)
    t = n - start
    if t >= rewarm + stable + d and i + 1 < len(cycles):
      start, previous_end = start + rewarm + stable + d, c_end
      continue
    if t < rewarm:
      return previous_end + (c_peak - previous_end) * t / rewarm
    if t <= rewarm + stable:
      return c_peak
    if t <= rewarm + stable + d:
      return c_end + (c_peak - c_end) * _cooldown(shape, (t - rewarm - stable) / d)
    return c_end
  raise AssertionError("unreachable")


# case -> (steadax arguments, reference arguments)
CASES = {
    "1-sqrt_hagele": (dict(peak_value=1e-3, total_steps=100, warmup_steps=10, decay_fraction=0.2,
                           decay_shape="1-sqrt"),
                      dict(peak=1e-3, warmup=10, total=100, decay=20, shape="1-sqrt")),
    "linear_steps": (dict(peak_value=0.5, total_steps=60, warmup_steps=7, decay_steps=13),
                     dict(peak=0.5, warmup=7, total=60, decay=13, shape="linear")),
    "cosine_init_end": (dict(peak_value=2.0, total_steps=50, warmup_steps=5, decay_steps=20,
                             init_value=0.2, end_value=0.1, decay_shape="cosine"),
                        dict(peak=2.0, warmup=5, total=50, decay=20, shape="cosine", init=0.2, end=0.1)),
    "fractions_not_integral": (dict(peak_value=1.0, total_steps=37, warmup_fraction=0.1, decay_fraction=0.3,
                                    decay_shape="1-sqrt", end_value=0.05),
                               dict(peak=1.0, warmup=3.7, total=37, decay=11.1, shape="1-sqrt", end=0.05)),
    "stable_steps_no_warmup": (dict(peak_value=1.0, stable_steps=30, decay_steps=10, decay_shape="linear"),
                               dict(peak=1.0, warmup=0, total=40, decay=10, shape="linear")),
    "cycles": (dict(peak_value=1.0, total_steps=40, warmup_steps=4, decay_fraction=0.25, decay_shape="1-sqrt",
                    end_value=0.1,
                    cycles=[dict(rewarmup_steps=5, stable_steps=10, decay_steps=8),
                            dict(rewarmup_steps=0, stable_steps=6, decay_steps=4, peak_value=0.5,
                                 end_value=0.0)]),
               dict(peak=1.0, warmup=4, total=40, decay=10, shape="1-sqrt", end=0.1,
                    cycles=[dict(rewarmup_steps=5, stable_steps=10, decay_steps=8),
                            dict(rewarmup_steps=0, stable_steps=6, decay_steps=4, peak_value=0.5,
                                 end_value=0.0)])),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_the_papers_formulas_at_every_step(case):
  kwargs, ref = CASES[case]
  schedule = steadax.warmup_stable_decay_schedule(**kwargs)
  last = ref["total"] + sum(c["rewarmup_steps"] + c["stable_steps"] + c["decay_steps"]
                            for c in ref.get("cycles", ())) + 5
  counts = np.arange(last + 1, dtype=np.int32)
  values = np.asarray(jax.jit(jax.vmap(schedule))(jnp.asarray(counts)))
  got = values.astype(np.float64)
  want = np.array([reference(int(n), **ref) for n in counts])
  # float32 arithmetic (float64 under x64) against the float64 formulas.
  np.testing.assert_allclose(got, want, rtol=1e-12 if X64 else 2e-6, atol=1e-15 if X64 else 1e-7,
                             err_msg=f"{case} differs from the formulas")
  # The ends are exact: the peak on the stable stretch, the end value from the end of the cooldown.
  exact = [n for n in counts if reference(int(n), **ref) in (ref["peak"], ref.get("end", 0.0))]
  np.testing.assert_array_equal(values[exact], want[exact].astype(values.dtype))
  # The op-by-op call (a Python int count) agrees.
  for n in (0, 3, int(ref["total"]) - 1, int(ref["total"]) + 2):
    np.testing.assert_allclose(float(schedule(n)), reference(n, **ref), rtol=2e-6, atol=1e-7)


def test_continuing_from_a_checkpoint_needs_no_offsets():
  # A finished run of 40 steps, then continued pretraining from its checkpoint: rebuild the
  # schedule with one more cycle; the restored count (40) gives the right value, and the values
  # of the first run do not change.
  first = dict(peak_value=0.1, total_steps=40, warmup_steps=4, decay_fraction=0.25, decay_shape="1-sqrt")
  more = dict(first, cycles=[dict(rewarmup_steps=4, stable_steps=10, decay_steps=6)])
  counts = jnp.arange(41, dtype=jnp.int32)
  np.testing.assert_array_equal(
      np.asarray(jax.vmap(steadax.warmup_stable_decay_schedule(**first))(counts)),
      np.asarray(jax.vmap(steadax.warmup_stable_decay_schedule(**more))(counts)))

  params = {"w": jnp.zeros(2)}
  ones = {"w": jnp.ones(2)}

  def run(tx, state, steps):
    def step(state, _):
      updates, state = tx.update(ones, state, params)
      return state, updates["w"][0]
    return jax.lax.scan(step, state, None, length=steps)

  tx_first = steadax.sgd(steadax.warmup_stable_decay_schedule(**first))
  checkpoint, _ = run(tx_first, tx_first.init(params), 40)
  tx_more = steadax.sgd(steadax.warmup_stable_decay_schedule(**more))
  _, updates = run(tx_more, checkpoint, 20)
  # sgd's update is -learning_rate * gradient: the continued run used the new cycle's values.
  want = [-reference(40 + k, peak=0.1, warmup=4, total=40, decay=10, shape="1-sqrt",
                     cycles=more["cycles"]) for k in range(20)]
  np.testing.assert_allclose(np.asarray(updates, np.float64), want, rtol=2e-6, atol=1e-8)
  # Re-warming from the cooled value (0) to the peak.
  assert float(updates[0]) == 0.0 and updates[4] == -np.asarray(0.1, updates.dtype)


def _train(tx, params, steps):
  """A tiny least-squares fit: the parameters after ``steps`` updates, and the learning rates."""
  target = jnp.asarray([1.0, -2.0, 0.5], jnp.float32)

  def step(carry, _):
    params, state = carry
    grads = jax.grad(lambda p: 0.5 * jnp.sum((p - target) ** 2))(params)
    updates, state = tx.update(grads, state, params)
    return (steadax.apply_updates(params, updates), state), updates
  (params, _), updates = jax.lax.scan(step, (params, tx.init(params)), None, length=steps)
  return params, updates


def test_sweep_over_the_cooldown_fraction_in_one_program():
  fractions = [0.1, 0.25, 0.5]
  build = lambda fraction: steadax.sgd(  # noqa: E731
      steadax.warmup_stable_decay_schedule(0.3, total_steps=20, warmup_steps=3, decay_fraction=fraction,
                                           decay_shape="1-sqrt"), momentum=0.5)
  swept = steadax.sweep(build, fractions)
  schedule = swept.transforms[-1].learning_rate
  assert np.shape(schedule.decay_fraction) == (3,)  # the fraction is a stacked leaf

  traces = []

  @jax.jit
  def run(tx, params):
    traces.append(1)
    return _train(tx, params, 24)

  params = jnp.zeros(3, jnp.float32)
  swept_params, swept_updates = jax.jit(jax.vmap(lambda tx: _train(tx, params, 24)))(swept)
  for i, fraction in enumerate(fractions):
    alone_params, alone_updates = run(build(fraction), params)
    # To float32 rounding, as tests/wrappers/test_sweep.py compares (equal bit for bit here, but
    # a batched program may contract multiplications and additions differently on another CPU).
    np.testing.assert_allclose(np.asarray(swept_updates[i]), np.asarray(alone_updates), rtol=2e-6,
                               atol=1e-7, err_msg=f"decay_fraction={fraction}")
    np.testing.assert_allclose(np.asarray(swept_params[i]), np.asarray(alone_params), rtol=2e-6,
                               atol=1e-7, err_msg=f"decay_fraction={fraction}")
  assert len(traces) == 1  # a new fraction is a new leaf value: the single run compiled once
  # The cooldowns really differ: the longer the cooldown, the earlier the updates shrink.
  assert float(jnp.abs(swept_updates[2, 12]).sum()) < float(jnp.abs(swept_updates[0, 12]).sum())
  # The decay shape is static: a sweep over it is refused, naming it.
  with pytest.raises(ValueError, match="decay_shape"):
    steadax.sweep(lambda s: steadax.sgd(steadax.warmup_stable_decay_schedule(
        0.3, total_steps=20, decay_fraction=0.2, decay_shape=s)), ["linear", "1-sqrt"])


def _kind(value):
  return f"{np.dtype(value.dtype).name}{' weak' if value.weak_type else ''}"


def test_value_is_weakly_typed_for_every_integer_count():
  schedule = steadax.warmup_stable_decay_schedule(1e-3, total_steps=100, warmup_steps=10, decay_fraction=0.2)
  default = "float64" if X64 else "float32"
  counts = [50, jnp.asarray(50, jnp.int32)] + ([jnp.asarray(50, jnp.int64)] if X64 else [])
  for count in counts:
    assert _kind(schedule(count)) == f"{default} weak"
    assert _kind(jax.eval_shape(schedule, count)) == f"{default} weak"
    assert _kind(jax.eval_shape(lambda s, c: s(c), schedule, count)) == f"{default} weak"
  # A strongly typed argument makes the value strong, as JAX promotes it.
  strong = steadax.warmup_stable_decay_schedule(jnp.float32(1e-3), total_steps=100, decay_steps=20)
  assert _kind(strong(jnp.asarray(50, jnp.int32))) == "float32"
  # bfloat16 parameters times the value stay bfloat16.
  params = jnp.ones(3, jnp.bfloat16)
  with jax.numpy_dtype_promotion("standard"):
    assert (params * schedule(jnp.asarray(95, jnp.int32))).dtype == jnp.bfloat16


def test_new_fractions_and_lengths_do_not_recompile():
  traces = []

  @jax.jit
  def evaluate(schedule, count):
    traces.append(1)
    return schedule(count)

  count = jnp.asarray(90, jnp.int32)
  values = [float(evaluate(steadax.warmup_stable_decay_schedule(
      1.0, total_steps=total, warmup_steps=5, decay_fraction=fraction), count))
      for total, fraction in ((100, 0.2), (120, 0.3), (95, 0.1))]
  assert len(traces) == 1
  # Linear cooldowns of 20, 36 and 9.5 steps, from steps 80, 84 and 85.5.
  assert values == pytest.approx([0.5, 1 - 6 / 36, 1 - 4.5 / 9.5], abs=1e-6)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(total_steps=10, decay_steps=2, decay_shape="exp"), ValueError, "decay_shape must be one of"),
    (dict(total_steps=10), ValueError, "exactly one of decay_steps and decay_fraction"),
    (dict(total_steps=10, decay_steps=2, decay_fraction=0.2), ValueError, "exactly one of"),
    (dict(decay_fraction=0.2, stable_steps=5), ValueError, "fractions of total_steps; give total_steps"),
    (dict(decay_steps=2), ValueError, "give total_steps, or stable_steps"),
    (dict(total_steps=10, stable_steps=5, decay_steps=2), ValueError, "total_steps or stable_steps, not both"),
    (dict(total_steps=10, warmup_steps=2, warmup_fraction=0.1, decay_steps=2), ValueError, "not both"),
    (dict(total_steps=10, warmup_steps=6, decay_steps=5), ValueError, r"together exceed total_steps \(10\)"),
    (dict(total_steps=10, warmup_fraction=0.5, decay_fraction=0.6), ValueError, "together exceed"),
    (dict(total_steps=10, decay_steps=-1), ValueError, "decay_steps must be a non-negative"),
    (dict(total_steps=10, decay_fraction=1.5), ValueError, r"decay_fraction must lie in \[0, 1\]"),
    (dict(total_steps=10, decay_steps=2, cycles=[dict(stable_steps=3)]), ValueError,
     r"cycles\[0\] needs 'decay_steps'"),
    (dict(total_steps=10, decay_steps=2, cycles=[dict(stable_steps=3, decay_steps=1, warmup=2)]), ValueError,
     r"cycles\[0\] has unknown keys \['warmup'\]"),
    (dict(total_steps=10, decay_steps=2, cycles=dict(stable_steps=3, decay_steps=1)), TypeError,
     "cycles must be a sequence of dicts"),
    (dict(total_steps=10, decay_steps=2, cycles=[dict(stable_steps=-3, decay_steps=1)]), ValueError,
     r"cycles\[0\]\['stable_steps'\] must be a non-negative"),
])
def test_bad_arguments_are_named(kwargs, error, match):
  with pytest.raises(error, match=match) as info:
    steadax.warmup_stable_decay_schedule(1.0, **kwargs)
  assert str(info.value).startswith("warmup_stable_decay_schedule: ")
