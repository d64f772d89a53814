"""stochastic_rounding and kahan_summation: bfloat16 parameters that still learn.

* Stochastic rounding is unbiased: the mean of 10^6 roundings of one value lies within 1e-3 of the
  spacing of its two neighbours from the exact value, and every rounding is one of the two.
* ``params + updates``, added by steadax's or Optax's ``apply_updates``, is exactly the rounded
  value (Sterbenz): the stages work in any loop that applies updates itself.
* Kahan's compensated sum of 10^4 tiny steps tracks the float32 sum where round-to-nearest stalls.
* In an ``nnx.Optimizer`` loop and a Linen ``TrainState`` loop, bfloat16 regression learns with
  either stage and stalls without.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import steadax

X64 = bool(jax.config.jax_enable_x64)
DRAWS = 1_000_000


def _neighbours(x: np.ndarray, dtype) -> tuple[np.ndarray, np.ndarray]:
  """The values of ``dtype`` just below and above each float64 ``x`` (equal when x is one)."""
  nearest = np.asarray(jnp.asarray(x, jnp.float32).astype(dtype)).astype(np.float64)
  up = np.asarray(jnp.nextafter(jnp.asarray(nearest, dtype), jnp.asarray(np.inf, dtype)), np.float64)
  down = np.asarray(jnp.nextafter(jnp.asarray(nearest, dtype), jnp.asarray(-np.inf, dtype)), np.float64)
  low = np.where(nearest <= x, nearest, down)
  high = np.where(nearest >= x, nearest, up)
  return low, high


@functools.partial(jax.jit, static_argnums=(2,))
def _rounded(params, updates, seed=0):
  """One step of ``stochastic_rounding`` applied by steadax's and by Optax's apply_updates."""
  tx = steadax.stochastic_rounding(seed=seed)
  d, _ = tx.update(updates, tx.init(params), params)
  with jax.numpy_dtype_promotion("standard"):
    theirs = optax.apply_updates(params, d)
  return steadax.apply_updates(params, d), theirs


# (parameter, update) pairs: fractions 0.1 .. 0.9 of the gap above 1, a step down across the binade
# boundary at 1 (the gap below is half the gap above), a negative parameter, a tiny update (1/256
# of the gap) and one at the float16 path.
CASES = [
    (jnp.bfloat16, 1.0, 0.1 * 2.0**-7), (jnp.bfloat16, 1.0, 0.25 * 2.0**-7),
    (jnp.bfloat16, 1.0, 0.5 * 2.0**-7), (jnp.bfloat16, 1.0, 0.9 * 2.0**-7),
    (jnp.bfloat16, 1.0, -0.3 * 2.0**-8), (jnp.bfloat16, -3.0, 0.7 * 2.0**-6),
    (jnp.bfloat16, 0.0234375, 2.0**-8 * 2.0**-13), (jnp.float16, 1.5, 0.4 * 2.0**-10),
]


@pytest.mark.parametrize("dtype, p, u", CASES, ids=[f"{np.dtype(d).name}-{p}-{u:.3g}" for d, p, u in CASES])
def test_stochastic_rounding_is_unbiased_and_lands_on_a_neighbour(dtype, p, u):
  # The criterion: |mean of 10^6 roundings - x| <= 1e-3 (hi - lo), x = p + u exactly. (One
  # rounding is lo + (hi - lo) Bernoulli(f): the mean's standard error is (hi - lo) sqrt(f (1-f)
  # / 10^6) <= 5e-4 (hi - lo), so the bound is 2 to 3 standard errors.)
  params = jnp.full(DRAWS, p, dtype)
  updates = jnp.full(DRAWS, u, jnp.float32)
  ours, theirs = _rounded(params, updates)
  ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
  np.testing.assert_array_equal(ours, theirs)  # Optax's apply_updates lands on the same values
  x = float(np.float64(np.asarray(jnp.asarray(p, dtype), np.float64)) + np.float64(u))
  low, high = (float(v[0]) for v in _neighbours(np.asarray([x]), dtype))
  assert low < x < high
  assert set(np.unique(ours)) <= {low, high}, np.unique(ours)
  gap = high - low
  bias = abs(ours.mean() - x) / gap
  assert bias <= 1e-3, f"|mean - x| = {bias:.2e} of the spacing"
  # Round-to-nearest moves by a whole gap or not at all: off by min(f, 1 - f) of the spacing.
  nearest = np.asarray(steadax.apply_updates(params[:1], updates[:1]), np.float64)[0]
  fraction = (x - low) / gap
  assert abs(nearest - x) / gap >= min(fraction, 1 - fraction) - 1e-9


def test_applied_updates_are_exactly_the_rounded_value():
  # Random parameters over six binades, both signs, steps up to half the parameter: the new value
  # is one of the two neighbours of p + u, whichever apply_updates adds the updates.
  rng = np.random.default_rng(1)
  p = (rng.choice([-1, 1], 4096) * 2.0 ** rng.uniform(-3, 3, 4096)).astype(np.float32)
  params = jnp.asarray(p, jnp.bfloat16)
  exact_p = np.asarray(params, np.float64)
  u = (exact_p * rng.uniform(-0.5, 0.5, 4096) * 10.0 ** rng.uniform(-6, 0, 4096)).astype(np.float32)
  ours, theirs = _rounded(params, jnp.asarray(u))
  np.testing.assert_array_equal(np.asarray(ours, np.float64), np.asarray(theirs, np.float64))
  x = exact_p + u.astype(np.float64)
  low, high = _neighbours(x, jnp.bfloat16)
  got = np.asarray(ours, np.float64)
  assert np.all((got == low) | (got == high))
  # Zero updates leave the parameters exactly as they are.
  same, _ = _rounded(params, jnp.zeros(4096, jnp.float32))
  np.testing.assert_array_equal(np.asarray(same, np.float64), exact_p)


def test_seed_and_count_choose_the_bits():
  params = jnp.ones(4096, jnp.bfloat16)
  updates = jnp.full(4096, 0.5 * 2.0**-7, jnp.float32)
  a, _ = _rounded(params, updates, 0)
  b, _ = _rounded(params, updates, 0)
  c, _ = _rounded(params, updates, 1)
  np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))
  assert np.mean(np.asarray(a, np.float32) != np.asarray(c, np.float32)) > 0.3
  tx = steadax.stochastic_rounding()
  state = tx.init(params)
  first, state = tx.update(updates, state, params)
  second, _ = tx.update(updates, state, params)
  assert int(state.count) == 1
  assert np.mean(np.asarray(first, np.float32) != np.asarray(second, np.float32)) > 0.3


def test_wide_parameters_pass_through_and_params_are_required():
  params = {"f32": jnp.asarray([1.0, -2.0, 3.0], jnp.float32)}
  if X64:
    params["f64"] = jnp.asarray([1.0, 0.5], jnp.float64)
  grads = jax.tree_util.tree_map(lambda x: 1e-9 * jnp.ones_like(x), params)
  tx = steadax.stochastic_rounding()
  out, _ = tx.update(grads, tx.init(params), params)
  for name in params:
    np.testing.assert_array_equal(np.asarray(out[name]), np.asarray(grads[name]))
  for stage in (steadax.stochastic_rounding(), steadax.kahan_summation()):
    with pytest.raises(ValueError, match=r"update needs the parameters"):
      stage.update(grads, stage.init(params))
  with pytest.raises(TypeError, match=r"seed must be a Python int"):
    steadax.stochastic_rounding(seed=0.5)  # type: ignore[arg-type]
  state = jax.eval_shape(steadax.kahan_summation().init, {"w": jnp.ones(3, jnp.bfloat16)})
  assert state.compensation["w"].dtype == jnp.bfloat16
  state = jax.eval_shape(steadax.kahan_summation(compensation_dtype=jnp.float32).init,
                         {"w": jnp.ones(3, jnp.bfloat16)})
  assert state.compensation["w"].dtype == jnp.float32


STEPS = 10_000


@functools.partial(jax.jit, static_argnums=(0,))
def _long_sum(stage, params, updates):
  """``params`` after adding each row of ``updates`` through ``stage`` (None: round to nearest),
  the compensation (zeros without one), and the float32 sum of the same bfloat16 updates."""
  def body(carry, u):
    p, state, total = carry
    if stage is not None:
      d, state = stage.update(u, state, p)
    else:
      d = u
    return (steadax.apply_updates(p, d), state, total + u.astype(jnp.float32)), None

  state = stage.init(params) if stage is not None else ()
  (p, state, total), _ = jax.lax.scan(body, (params, state, params.astype(jnp.float32)), updates)
  compensation = state.compensation if isinstance(state, steadax.KahanSummationState) else jnp.zeros_like(p)
  return p, compensation, total


@pytest.mark.parametrize("kind", ["noisy", "constant"])
def test_kahan_summation_tracks_the_float32_sum_of_tiny_steps(kind):
  # 10^4 steps of about 1e-4 on parameters in [0.5, 2): every step is below half the spacing
  # (2^-9 to 2^-7), so round-to-nearest never moves; the compensated pair p + c follows the float32
  # sum of the same bfloat16 steps. Constant steps are the worst case of a round-to-nearest
  # compensation (its rounding errors repeat instead of averaging out).
  rng = np.random.default_rng(2)
  p0 = jnp.asarray(rng.uniform(0.5, 2.0, 256), jnp.bfloat16)
  noise = rng.normal(size=(STEPS, 256)) if kind == "noisy" else np.zeros((STEPS, 256))
  updates = jnp.asarray(1e-4 * (1 + 0.5 * noise), jnp.bfloat16)
  start = np.asarray(p0, np.float64)
  stuck, _, total = _long_sum(None, p0, updates)
  np.testing.assert_array_equal(np.asarray(stuck, np.float64), start)
  p, c, total = _long_sum(steadax.kahan_summation(), p0, updates)
  total = np.asarray(total, np.float64)
  tracked = np.asarray(p, np.float64) + np.asarray(c, np.float64)
  error = np.abs(tracked - total) / np.abs(total - start)
  assert np.max(error) < (5e-3 if kind == "noisy" else 5e-2), np.max(error)
  # The parameter itself is the compensated sum rounded: within half a spacing of it.
  spacing = 2.0 ** (np.floor(np.log2(np.abs(total))) - 7)
  assert np.all(np.abs(np.asarray(p, np.float64) - total) <= 0.5 * spacing + np.abs(tracked - total))
  # Stochastic rounding tracks it on average (unbiased), with a random walk per parameter.
  sr, _, _ = _long_sum(steadax.stochastic_rounding(), p0, updates)
  moved = np.asarray(sr, np.float64) - start
  assert abs(moved.mean() / (total - start).mean() - 1) < 0.02


def _regression_data():
  rng = np.random.default_rng(3)
  x = jnp.asarray(rng.normal(size=(32, 4)), jnp.float32)
  y = x @ jnp.asarray([[1.3], [0.6], [-1.1], [0.9]], jnp.float32)
  return x, y


# Steps of about 1e-3 on weights near 1: below half the bfloat16 spacing there (2^-9).
LR, TRAIN_STEPS = 2e-4, 300


@pytest.mark.x32_only
def test_bfloat16_regression_learns_in_nnx_optimizer_and_train_state_loops():
  from flax import nnx
  from flax.training import train_state

  x, y = _regression_data()

  def loss_of(w):
    return jnp.mean((x @ w.astype(jnp.float32) - y) ** 2)

  def nnx_loss(stage):
    model = nnx.Linear(4, 1, use_bias=False, param_dtype=jnp.bfloat16,
                       kernel_init=nnx.initializers.ones, rngs=nnx.Rngs(0))
    tx = steadax.sgd(LR) if stage is None else steadax.chain(steadax.sgd(LR), stage)
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)

    @nnx.jit
    def step(model, optimizer):
      grads = nnx.grad(lambda m: loss_of(m.kernel[...]))(model)
      optimizer.update(model, grads)

    for _ in range(TRAIN_STEPS):
      step(model, optimizer)
    assert model.kernel[...].dtype == jnp.bfloat16
    return float(loss_of(model.kernel[...]))

  def train_state_loss(stage):
    tx = steadax.sgd(LR) if stage is None else steadax.chain(steadax.sgd(LR), stage)
    ts = train_state.TrainState.create(apply_fn=None, params={"w": jnp.ones((4, 1), jnp.bfloat16)}, tx=tx)

    @jax.jit
    def run(ts):
      def body(i, ts):
        return ts.apply_gradients(grads=jax.grad(lambda p: loss_of(p["w"]))(ts.params))
      return jax.lax.fori_loop(0, TRAIN_STEPS, body, ts)

    ts = run(ts)
    assert ts.params["w"].dtype == jnp.bfloat16
    return float(loss_of(ts.params["w"]))

  # The float32 reference: the same steps on float32 weights.
  w = jnp.ones((4, 1), jnp.float32)
  for _ in range(TRAIN_STEPS):
    w = w - LR * jax.grad(loss_of)(w)
  reference, initial = float(loss_of(w)), float(loss_of(jnp.ones((4, 1), jnp.float32)))
  assert reference < 0.8 * initial
  for client in (nnx_loss, train_state_loss):
    assert client(None) == pytest.approx(initial, rel=1e-6), client.__name__  # stalled
    # Kahan's pair follows the float32 run closely; stochastic rounding follows it on average, each
    # weight a random walk of about a spacing (2^-8 here) times sqrt(steps * f (1 - f)).
    for stage, tolerance in ((steadax.stochastic_rounding(), 0.25), (steadax.kahan_summation(), 1e-3)):
      got = client(stage)
      assert abs(got - reference) < tolerance * (initial - reference), (client.__name__, stage, got)
