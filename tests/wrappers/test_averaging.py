"""ema_params / swa_params / averaged_params: the average follows the NumPy recurrences (EMA with
and without its warmups, SWA from a start step every k steps), a float32 average of bfloat16
parameters, only real steps under MultiSteps (either nesting), and the average read back through
nnx.Optimizer and a Linen TrainState."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax

X64 = bool(jax.config.jax_enable_x64)
FLOAT = jnp.float64 if X64 else jnp.float32
STEPS = 12
# Gradients of a random walk: sgd(1.0) with these as gradients moves the parameters by -g.
_RNG = np.random.default_rng(0)
GRADS = _RNG.normal(size=(STEPS, 5))
INITIAL = _RNG.normal(size=5)


@functools.partial(jax.jit, static_argnums=(0,))
def _trajectory(tx, params, grads):
  """The parameters after each step and the average after each step (one scan)."""
  def body(carry, g):
    p, s = carry
    u, s = tx.update(g.astype(p.dtype), s, p)
    p = steadax.apply_updates(p, u)
    return (p, s), (p, steadax.averaged_params(s))

  return jax.lax.scan(body, (params, tx.init(params)), grads)[1]


def _numpy_ema(xs, initial, decays):
  a, out = np.asarray(initial, np.float64), []
  for x, d in zip(xs, decays):
    a = d * a + (1 - d) * x
    out.append(a)
  return np.stack(out)


def _decays(kind, decay, start, gamma=1.0, power=2 / 3):
  """timm's get_decay (and TensorFlow's num_updates form) for t = 1..STEPS, written out."""
  out = []
  for t in range(1, STEPS + 1):
    s = t - start - 1
    if s <= 0:
      out.append(0.0)
    elif kind is None:
      out.append(decay)
    elif kind == "power":
      out.append(min(1 - (1 + s / gamma) ** -power, decay))
    else:
      out.append(min((1 + s) / (10 + s), decay))
  return out


TOL = dict(rtol=1e-12, atol=1e-12) if X64 else dict(rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("warmup, decay, start", [
    (None, 0.8, 0), (None, 0.9, 3), ("power", 0.95, 0), ("power", 0.5, 2), ("num_updates", 0.9, 1),
])
def test_ema_follows_the_numpy_recurrence(warmup, decay, start):
  tx = steadax.ema_params(steadax.sgd(1.0), decay, warmup=warmup, start_step=start,
                          warmup_gamma=2.0 if warmup == "power" else 1.0)
  xs, averages = _trajectory(tx, jnp.asarray(INITIAL, FLOAT), jnp.asarray(GRADS, FLOAT))
  assert averages.dtype == FLOAT
  decays = _decays(warmup, decay, start, gamma=2.0 if warmup == "power" else 1.0)
  expected = _numpy_ema(np.asarray(xs, np.float64), INITIAL.astype(np.asarray(xs).dtype), decays)
  np.testing.assert_allclose(np.asarray(averages), expected, **TOL)
  # The step after start_step copies the parameters exactly.
  np.testing.assert_array_equal(np.asarray(averages[start]), np.asarray(xs[start]))


def test_ema_decay_warmup_values():
  # The closed forms at a few steps: timm's power warmup reaches 0.999 near 31.6k steps with
  # gamma=1, power=2/3; TensorFlow's form gives 2/11 at s=1.
  tx = steadax.ema_params(steadax.sgd(1.0), 0.9999, warmup="power")
  decay = lambda t: float(tx.decay_at(jnp.asarray(t, jnp.int32), jnp.float32))  # noqa: E731
  assert decay(1) == 0.0
  assert decay(2) == pytest.approx(1 - 2 ** (-2 / 3), rel=1e-6)
  assert decay(31_624) == pytest.approx(0.999, abs=2e-6)
  tf = steadax.ema_params(steadax.sgd(1.0), 0.99, warmup="num_updates")
  assert float(tf.decay_at(jnp.asarray(2, jnp.int32), jnp.float32)) == pytest.approx(2 / 11)
  assert float(tf.decay_at(jnp.asarray(10_000, jnp.int32), jnp.float32)) == pytest.approx(0.99)


@pytest.mark.parametrize("start, k", [(0, 1), (3, 1), (2, 3)])
def test_swa_is_the_mean_of_the_chosen_steps(start, k):
  tx = steadax.swa_params(steadax.sgd(1.0), start_step=start, every_k_steps=k)
  xs, averages = _trajectory(tx, jnp.asarray(INITIAL, FLOAT), jnp.asarray(GRADS, FLOAT))
  xs = np.asarray(xs, np.float64)
  for t in range(1, STEPS + 1):
    chosen = [i for i in range(1, t + 1) if i - start > 0 and (i - start) % k == 0]
    if t <= start:
      expected = xs[t - 1]           # before the start the average follows the parameters
    elif not chosen:
      expected = xs[start - 1] if start else INITIAL
    else:
      expected = xs[[i - 1 for i in chosen]].mean(axis=0)
    np.testing.assert_allclose(np.asarray(averages[t - 1]), expected, **TOL, err_msg=f"step {t}")


def test_bfloat16_parameters_keep_a_float32_average():
  # Steps of 1e-3 around 1: a bfloat16 average (spacing 2^-7) cannot take 1% of a step; a float32
  # one follows the recurrence of the bfloat16 parameters.
  grads = jnp.asarray(np.full((STEPS, 5), -0.03), jnp.float32)
  params = jnp.ones(5, jnp.bfloat16)
  tx = steadax.ema_params(steadax.sgd(1.0), 0.99)
  xs, averages = _trajectory(tx, params, grads)
  assert xs.dtype == jnp.bfloat16 and averages.dtype == jnp.float32
  expected = _numpy_ema(np.asarray(xs, np.float64), np.ones(5), _decays(None, 0.99, 0))
  np.testing.assert_allclose(np.asarray(averages), expected, rtol=1e-6)
  narrow = steadax.ema_params(steadax.sgd(1.0), 0.99, average_dtype=jnp.bfloat16)
  _, stuck = _trajectory(narrow, params, grads)
  assert stuck.dtype == jnp.bfloat16
  assert np.all(np.asarray(stuck[-1], np.float64) == np.asarray(stuck[1], np.float64))  # stalled
  # With params, the reader rounds the average to each parameter's dtype.
  state = tx.init({"w": params})
  assert steadax.averaged_params(state, {"w": params})["w"].dtype == jnp.bfloat16


@pytest.mark.parametrize("nesting", ["outside", "inside"])
def test_multi_steps_averages_the_real_steps_only(nesting):
  k = 3
  if nesting == "outside":
    tx = steadax.ema_params(steadax.MultiSteps(steadax.sgd(1.0), k), 0.5)
  else:
    tx = steadax.MultiSteps(steadax.ema_params(steadax.sgd(1.0), 0.5), k)
  xs, averages = _trajectory(tx, jnp.asarray(INITIAL, FLOAT), jnp.asarray(GRADS, FLOAT))
  real = np.asarray(xs, np.float64)[k - 1::k]   # the parameters after each real step
  expected = _numpy_ema(real, INITIAL, _decays(None, 0.5, 0)[:len(real)])
  np.testing.assert_allclose(np.asarray(averages)[k - 1::k], expected, **TOL)
  # Between real steps the average does not move.
  np.testing.assert_array_equal(np.asarray(averages)[k::k], np.asarray(averages)[k - 1:-1:k])
  state = tx.init(jnp.asarray(INITIAL, FLOAT))
  for g in GRADS[:k]:
    state = tx.update(jnp.asarray(g, FLOAT), state, jnp.asarray(INITIAL, FLOAT))[1]
  record = steadax.tree.get(state, "ParamAveragingState")
  assert int(record.count) == 1 and int(record.num_averaged) == 1


def test_updates_pass_through_and_params_are_required():
  params = {"w": jnp.ones(3, jnp.float32)}
  grads = {"w": jnp.asarray([0.1, -0.2, 0.3], jnp.float32)}
  inner = steadax.adam(0.1)
  tx = steadax.ema_params(inner, 0.9)
  u, _ = tx.update(grads, tx.init(params), params)
  expected, _ = inner.update(grads, inner.init(params), params)
  np.testing.assert_array_equal(u["w"], expected["w"])
  with pytest.raises(ValueError, match=r"ema_params: update needs the parameters"):
    tx.update(grads, tx.init(params))
  with pytest.raises(ValueError, match=r"averaged_params: `state` holds no ParamAveragingState"):
    steadax.averaged_params(inner.init(params))
  with pytest.raises(ValueError, match=r"warmup must be one of"):
    steadax.ema_params(inner, warmup="cosine")
  with pytest.raises(ValueError, match=r"every_k_steps must lie in"):
    steadax.swa_params(inner, every_k_steps=0)


def test_state_types_and_abstract_init():
  params = {"bf16": jnp.ones((2, 3), jnp.bfloat16), "f32": jnp.ones(2, jnp.float32),
            "c64": jnp.ones(2, jnp.complex64)}
  state = jax.eval_shape(steadax.swa_params(steadax.sgd(0.1)).init, params)
  assert state.count.dtype == jnp.int32 and state.num_averaged.dtype == jnp.int32
  assert {k: v.dtype for k, v in state.average.items()} == {
      "bf16": jnp.float32, "f32": jnp.float32, "c64": jnp.complex64}
  narrow = jax.eval_shape(steadax.swa_params(steadax.sgd(0.1), average_dtype=jnp.bfloat16).init, params)
  assert narrow.average["f32"].dtype == jnp.bfloat16 and narrow.average["c64"].dtype == jnp.complex64


@pytest.mark.x32_only
def test_average_read_from_nnx_optimizer_and_train_state():
  # The clients keep the state in their own containers; averaged_params reads it there, and the
  # average equals the plain loop's.
  from flax import nnx
  from flax.training import train_state

  x = jnp.asarray(_RNG.normal(size=(8, 4)), jnp.float32)
  y = jnp.asarray(_RNG.normal(size=(8, 2)), jnp.float32)
  make = lambda: steadax.ema_params(steadax.adamw(0.05), 0.9, warmup="power")  # noqa: E731
  model = nnx.Linear(4, 2, rngs=nnx.Rngs(0))
  initial = {"bias": model.bias[...], "kernel": model.kernel[...]}

  def loss(p):
    return jnp.mean((x @ p["kernel"] + p["bias"][None] - y) ** 2)

  tx, params = make(), initial
  state = tx.init(params)
  for _ in range(4):
    u, state = tx.update(jax.grad(loss)(params), state, params)
    params = steadax.apply_updates(params, u)
  expected = steadax.averaged_params(state)

  optimizer = nnx.Optimizer(model, make(), wrt=nnx.Param)

  @nnx.jit
  def nnx_step(model, optimizer):
    grads = nnx.grad(lambda m: jnp.mean((m(x) - y) ** 2))(model)
    optimizer.update(model, grads)

  for _ in range(4):
    nnx_step(model, optimizer)
  got = steadax.averaged_params(optimizer.opt_state)
  for name in ("bias", "kernel"):
    np.testing.assert_allclose(np.asarray(got[name]), np.asarray(expected[name]), rtol=1e-5, atol=1e-6)

  ts = train_state.TrainState.create(apply_fn=None, params=initial, tx=make())
  step = jax.jit(lambda ts: ts.apply_gradients(grads=jax.grad(loss)(ts.params)))
  for _ in range(4):
    ts = step(ts)
  got = steadax.averaged_params(ts.opt_state)
  for name in ("bias", "kernel"):
    np.testing.assert_allclose(np.asarray(got[name]), np.asarray(expected[name]), rtol=1e-5, atol=1e-6)
