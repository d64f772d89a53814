"""NorMuon against its reference implementation transcribed into NumPy (issue 34 acceptance: to
1e-5 over 50 steps), its per-neuron state on stacked and multi-axis weights, and its errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax
from steadax.contrib import MuonDimensionNumbers, NorMuonState

X64 = bool(jax.config.jax_enable_x64)
JORDAN = (3.4445, -4.7750, 2.0315)


# -- the reference, transcribed ------------------------------------------------------------------
# github.com/zichongli5/NorMuon, normuon.py (d45c9a4): ``normuon_update`` and
# ``SingleDeviceNorMuon.step``, line by line, in PyTorch's (out, in) layout. Two departures, both
# named: the Newton-Schulz iteration runs in the array's dtype (the reference casts to bfloat16;
# steadax computes in at least float32), and ``debias=True`` replaces the Nesterov look-ahead
# ``beta m + (1 - beta) g`` by Optax's bias-corrected one ``beta m / (1 - beta^(t+1)) + (1 - beta)
# g / (1 - beta^t)`` (steadax's scale_by_muon is Optax's Muon). Without Nesterov the bias
# correction divides the momentum by a scalar that the Frobenius normalisation removes, so
# ``debias`` does not matter there and the reference is compared as it is.

def _zeropower_via_newtonschulz5(g, steps=5):
  a, b, c = JORDAN
  x = g
  tall = g.shape[-2] > g.shape[-1]
  if tall:
    x = x.T
  x = x / (np.linalg.norm(x) + 1e-7)
  for _ in range(steps):
    gram = x @ x.T
    x = a * x + (b * gram + c * gram @ gram) @ x
  return x.T if tall else x


def _normuon_update(grad, momentum, second_momentum, t, beta, beta2, nesterov, debias):
  momentum[...] = momentum + (1 - beta) * (grad - momentum)          # momentum.lerp_(grad, 1 - beta)
  if nesterov and debias:
    update = beta * momentum / (1 - beta ** (t + 1)) + (1 - beta) * grad / (1 - beta**t)
  elif nesterov:
    update = grad + beta * (momentum - grad)                          # grad.lerp_(momentum, beta)
  else:
    update = momentum
  update = _zeropower_via_newtonschulz5(update)
  vnorm = np.linalg.norm(update)
  v_mean = np.mean(update * update, axis=-1, keepdims=True)
  second_momentum[...] = second_momentum + (1 - beta2) * (v_mean - second_momentum)
  update = update * (1 / (np.sqrt(second_momentum) + 1e-10))
  update = update * (vnorm / (np.linalg.norm(update) + 1e-10))
  return update * max(1, grad.shape[-2] / grad.shape[-1]) ** 0.5


def reference_normuon(w0, grad_fn, steps, lr, weight_decay, beta, beta2, nesterov, debias, dtype):
  """``SingleDeviceNorMuon`` on one matrix ``w0`` (steadax's (in, out) layout), the parameters
  after every step."""
  p = np.asarray(w0, dtype).T.copy()                    # PyTorch's (out, in)
  momentum = np.zeros_like(p)
  second_momentum = np.zeros_like(p[..., 0:1])
  out = []
  for t in range(1, steps + 1):
    grad = np.asarray(grad_fn(p.T), dtype).T
    update = _normuon_update(grad, momentum, second_momentum, t, beta, beta2, nesterov, debias)
    if weight_decay:
      p = p * (1 - lr * weight_decay)
    p = p - lr * update
    out.append(p.T.copy())
  return np.stack(out)


# -- the problem ---------------------------------------------------------------------------------

def _spd(n, seed):
  q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(n, n)))
  return (q * np.linspace(0.3, 2.0, n)) @ q.T


def _steadax_trajectory(tx, w0, grad_fn, steps, dtype):
  """Parameters after every step, one ``lax.scan``; the gradient maths is ``grad_fn``'s."""
  def step(carry, _):
    w, state = carry
    g = grad_fn(w)
    updates, state = tx.update(g, state, w)
    w = steadax.apply_updates(w, updates)
    return (w, state), w

  w = jnp.asarray(w0, dtype)
  _, ws = jax.jit(lambda w: jax.lax.scan(step, (w, tx.init(w)), None, length=steps))(w)
  return np.asarray(ws)


def _jnp_grad(grad_fn_np_parts):
  a, b, target = grad_fn_np_parts
  return lambda w: jnp.asarray(a, w.dtype) @ (w - jnp.asarray(target, w.dtype)) @ jnp.asarray(b, w.dtype)


def _parts(shape, seed):
  rng = np.random.default_rng(seed)
  a, b = _spd(shape[0], seed + 1), _spd(shape[1], seed + 2)
  target = rng.normal(size=shape)
  w0 = rng.normal(size=shape)
  return w0, (a, b, target)


CASES = [
    # (shape (in, out), nesterov, debias of the transcription, weight decay)
    ((6, 10), False, False, 0.0),   # the reference as it is (the paper's plain momentum)
    ((10, 4), False, False, 0.1),   # tall: the iteration transposes; the shape factor sqrt(out / in) = 1
    ((4, 10), True, True, 0.0),     # Nesterov, with Optax's bias correction; sqrt(10 / 4)
]


@pytest.mark.parametrize("shape, nesterov, debias, weight_decay", CASES)
def test_normuon_matches_the_reference_over_50_steps(shape, nesterov, debias, weight_decay):
  # float32 parameters (float64 ones under x64: both sides then compute in float64).
  dtype = np.float64 if X64 else np.float32
  w0, parts = _parts(shape, seed=sum(shape))
  a, b, target = parts
  lr, beta, beta2 = 0.05, 0.9, 0.95
  tx = steadax.contrib.normuon(lr, beta=beta, beta2=beta2, eps=1e-7, weight_decay=weight_decay,
                               nesterov=nesterov)
  got = _steadax_trajectory(tx, w0, _jnp_grad(parts), 50, dtype)
  want = reference_normuon(w0, lambda w: a @ (w - target) @ b, 50, lr, weight_decay, beta, beta2,
                           nesterov, debias, dtype)
  np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
  # Far from Muon's trajectory: the comparison can tell NorMuon from Muon.
  muon = _steadax_trajectory(steadax.contrib.muon(lr, beta=beta, eps=1e-7, weight_decay=weight_decay,
                                                  nesterov=nesterov), w0, _jnp_grad(parts), 50, dtype)
  assert np.max(np.abs(muon - want)) > 1e-3


def test_stacked_and_multi_axis_weights_normalise_each_matrix_per_neuron():
  # A stacked weight (layers, in, out) with dimension numbers is a stack of independent matrices:
  # each slice follows the reference on its own, and nu is (layers, out), stacked like it. An
  # attention projection (in, heads, head_dim) with output axes (1, 2) is its (in, heads * head_dim)
  # matrix: nu is (heads, head_dim).
  dtype = np.float64 if X64 else np.float32
  lr, beta, beta2 = 0.05, 0.9, 0.95
  slices = [_parts((6, 8), seed=10 + i) for i in range(3)]
  w0 = np.stack([w for w, _ in slices])
  grads = [_jnp_grad(parts) for _, parts in slices]
  dims = MuonDimensionNumbers(reduction_axis=1, output_axis=2)
  tx = steadax.contrib.normuon(lr, beta=beta, beta2=beta2, eps=1e-7, nesterov=False,
                               muon_weight_dimension_numbers=dims)
  got = _steadax_trajectory(tx, w0, lambda w: jnp.stack([g(w[i]) for i, g in enumerate(grads)]), 20, dtype)
  for i, (w, (a, b, target)) in enumerate(slices):
    want = reference_normuon(w, lambda w, a=a, b=b, t=target: a @ (w - t) @ b, 20, lr, 0.0, beta,
                             beta2, False, False, dtype)
    np.testing.assert_allclose(got[:, i], want, rtol=0, atol=1e-5)
  state = tx.init(jnp.asarray(w0, dtype))
  nu = state.inner_states["muon"].inner_state[0][1].nu
  assert nu.shape == (3, 8) and nu.dtype == dtype

  # (in, heads, head_dim) = (6, 2, 5) as the (6, 10) matrix.
  w, (a, b, target) = _parts((6, 10), seed=20)
  heads = MuonDimensionNumbers(reduction_axis=0, output_axis=(1, 2))
  tx = steadax.contrib.scale_by_normuon(beta=beta, beta2=beta2, eps=1e-7, nesterov=False,
                                        weight_dimension_numbers=heads)
  flat = steadax.contrib.scale_by_normuon(beta=beta, beta2=beta2, eps=1e-7, nesterov=False)
  g = jnp.asarray(a @ (w - target) @ b, dtype)
  u3, (_, s3) = tx.update(g.reshape(6, 2, 5), tx.init(g.reshape(6, 2, 5)))
  u2, (_, s2) = flat.update(g, flat.init(g))
  assert s3.nu.shape == (2, 5)
  np.testing.assert_allclose(np.asarray(u3).reshape(6, 10), np.asarray(u2), rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(np.asarray(s3.nu).reshape(10), np.asarray(s2.nu), rtol=1e-6)


def test_state_and_types():
  params = {"w": jnp.ones((3, 4), jnp.bfloat16), "v": jnp.ones((5, 2), jnp.float32)}
  tx = steadax.contrib.scale_by_normuon(nu_dtype=jnp.float32)
  muon_state, state = tx.init(params)
  assert isinstance(state, NorMuonState)
  assert state.nu["w"].shape == (4,) and state.nu["w"].dtype == jnp.float32
  assert state.nu["v"].shape == (2,)
  default = steadax.contrib.scale_by_normuon().init(params)[1]
  assert default.nu["w"].dtype == jnp.bfloat16  # the parameter's real dtype by default
  updates, _ = tx.update(params, (muon_state, state), params)
  assert updates["w"].dtype == jnp.bfloat16 and updates["v"].dtype == jnp.float32


def test_a_vector_without_dimension_numbers_is_named():
  tx = steadax.contrib.scale_by_normuon()
  with pytest.raises(ValueError, match=r"scale_by_normuon: the parameter at \['b'\] has shape \(3,\)"):
    tx.init({"w": jnp.ones((2, 3)), "b": jnp.ones(3)})
  # normuon sends it to AdamW, as muon does.
  opt = steadax.contrib.normuon(0.1)
  params = {"w": jnp.ones((2, 3)), "b": jnp.ones(3)}
  updates, _ = opt.update(params, opt.init(params), params)
  assert updates["b"].shape == (3,)
