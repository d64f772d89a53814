"""Numerical stability and dtype behaviour against float64 NumPy/SciPy references.

Inputs at scale 1 and 1e4, in float32 and bfloat16: results stay finite, keep the input dtype and
match a float64 reference computed on the very same (rounded) input values, within the dtype's
tolerance. Gradients at scale 1e4 stay finite.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special

from steadax import losses

from ._helpers import X64, to_f64

# References, float64 NumPy, written from the definitions.


def _log_softmax(x, axis=-1):
  return special.log_softmax(x, axis=axis)


def ref_softmax_ce(x, y):
  return -np.sum(y * _log_softmax(x), axis=-1)


def ref_int_ce(x, labels):
  return special.logsumexp(x, axis=-1) - np.take_along_axis(x, labels[..., None], -1)[..., 0]


def ref_sigmoid_bce(x, y):
  return y * np.logaddexp(0.0, -x) + (1 - y) * np.logaddexp(0.0, x)


def ref_focal(x, y, gamma=2.0):
  one_minus_pt = y * special.expit(-x) + (1 - y) * special.expit(x)
  return ref_sigmoid_bce(x, y) * one_minus_pt ** gamma


def ref_poly(x, y, epsilon=2.0):
  return ref_softmax_ce(x, y) + epsilon * np.sum(y * (1 - special.softmax(x, axis=-1)), -1)


def ref_kl(log_p, t):
  safe_t = np.where(t > 0, t, 1.0)
  return np.sum(np.where(t > 0, t * (np.log(safe_t) - log_p), 0.0), axis=-1)


def ref_generalized_kl(log_p, t):
  return ref_kl(log_p, t) + np.sum(np.exp(log_p) - t, axis=-1)


def ref_kl_log(log_p, log_t):
  return np.sum(np.exp(log_t) * (log_t - log_p), axis=-1)


def ref_sparse_plus(z):
  return np.where(z <= -1, 0.0, np.where(z >= 1, z, (z + 1) ** 2 / 4))


def ref_sparsemax(s):
  out = np.zeros_like(s)
  for idx in np.ndindex(s.shape[:-1]):
    z = s[idx]
    u = np.sort(z)[::-1]
    css = np.cumsum(u)
    k = np.arange(1, len(z) + 1)
    rho = k[1 + k * u > css][-1]
    tau = (css[rho - 1] - 1) / rho
    out[idx] = np.maximum(z - tau, 0)
  return out


def ref_multiclass_sparsemax(s, labels):
  p = ref_sparsemax(s)
  s_y = np.take_along_axis(s, labels[..., None], -1)[..., 0]
  return np.sum(p * s, -1) - s_y + 0.5 * (1 - np.sum(p * p, -1))


def ref_huber(x, delta=1.0):
  a = np.abs(x)
  return np.where(a <= delta, 0.5 * a * a, delta * (a - 0.5 * delta))


def ref_log_cosh(x):
  a = np.abs(x)
  with np.errstate(over="ignore"):
    return np.where(a < 1, np.log(np.cosh(a)), a + np.log1p(np.exp(-2 * a)) - math.log(2))


def ref_cosine(a, b):
  return np.sum(a * b, -1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def ref_ranking(x, y):
  return np.mean(ref_softmax_ce(x, y))


def ref_ntxent(e, labels, temperature=0.07):
  e = e / np.linalg.norm(e, axis=1, keepdims=True)
  s = e @ e.T / temperature
  total, count = 0.0, 0
  for i in range(len(labels)):
    neg = s[i][labels != labels[i]]
    for j in range(len(labels)):
      if i != j and labels[i] == labels[j]:
        total += -(s[i, j] - special.logsumexp(np.append(neg, s[i, j])))
        count += 1
  return total / count


def ref_triplet(a, p, n, margin=1.0, eps=1e-6):
  dp = np.sqrt(np.sum((a - p) ** 2, -1) + eps)
  dn = np.sqrt(np.sum((a - n) ** 2, -1) + eps)
  return np.maximum(dp - dn + margin, 0)


def ref_dice(x, t, smooth=1.0):
  p = special.softmax(x, axis=-1)
  axes = tuple(range(1, x.ndim - 1))
  inter = np.sum(p * t, axes)
  denom = inter + 0.5 * (np.sum(p, axes) - inter) + 0.5 * (np.sum(t, axes) - inter) + smooth
  return np.mean(1 - (inter + smooth) / denom, -1)


def ref_smooth(y, alpha=0.1):
  return (1 - alpha) * y + alpha / y.shape[-1]


# Input builders: (rng, scale) -> float64 numpy inputs; integer inputs stay integer.

def _x(r, shape, scale):
  return r.normal(size=shape) * scale


def _dist(r, shape):
  return special.softmax(r.normal(size=shape) * 2, axis=-1)


def _onehot(r, shape):
  return np.eye(shape[-1])[r.integers(0, shape[-1], shape[:-1])]


CASES = {
    "softmax_cross_entropy": (lambda r, s: (_x(r, (4, 6), s), _dist(r, (4, 6))), ref_softmax_ce),
    "safe_softmax_cross_entropy": (lambda r, s: (_x(r, (4, 6), s), _dist(r, (4, 6))),
                                   ref_softmax_ce),
    "softmax_cross_entropy_with_integer_labels": (
        lambda r, s: (_x(r, (4, 6), s), r.integers(0, 6, 4)), ref_int_ce),
    "poly_loss_cross_entropy": (lambda r, s: (_x(r, (4, 6), s), _dist(r, (4, 6))), ref_poly),
    "sigmoid_binary_cross_entropy": (
        lambda r, s: (_x(r, (4, 6), s), r.integers(0, 2, (4, 6)).astype(float)), ref_sigmoid_bce),
    "sigmoid_focal_loss": (
        lambda r, s: (_x(r, (4, 6), s), r.integers(0, 2, (4, 6)).astype(float)), ref_focal),
    "kl_divergence": (lambda r, s: (_log_softmax(_x(r, (4, 6), s)), _dist(r, (4, 6))), ref_kl),
    "generalized_kl_divergence": (
        lambda r, s: (_log_softmax(_x(r, (4, 6), s)), _dist(r, (4, 6))), ref_generalized_kl),
    "kl_divergence_with_log_targets": (
        lambda r, s: (_log_softmax(_x(r, (4, 6), s)), _log_softmax(_x(r, (4, 6), 2))),
        ref_kl_log),
    "hinge_loss": (lambda r, s: (_x(r, (4, 6), s), r.choice([-1.0, 1.0], (4, 6))),
                   lambda x, y: np.maximum(0, 1 - x * y)),
    "perceptron_loss": (lambda r, s: (_x(r, (4, 6), s), r.choice([-1.0, 1.0], (4, 6))),
                        lambda x, y: np.maximum(0, -x * y)),
    "sparsemax_loss": (lambda r, s: (_x(r, (4, 6), s), r.integers(0, 2, (4, 6))),
                       lambda x, y: ref_sparse_plus(np.where(y != 0, -x, x))),
    "multiclass_hinge_loss": (
        lambda r, s: (_x(r, (4, 6), s), r.integers(0, 6, 4)),
        lambda x, y: np.max(x + 1 - np.eye(6)[y], -1) - np.take_along_axis(x, y[:, None], -1)[:, 0]),
    "multiclass_perceptron_loss": (
        lambda r, s: (_x(r, (4, 6), s), r.integers(0, 6, 4)),
        lambda x, y: np.max(x, -1) - np.take_along_axis(x, y[:, None], -1)[:, 0]),
    "multiclass_sparsemax_loss": (lambda r, s: (_x(r, (4, 6), s), r.integers(0, 6, 4)),
                                  ref_multiclass_sparsemax),
    "squared_error": (lambda r, s: (_x(r, (4, 6), s), _x(r, (4, 6), s)),
                      lambda p, t: (p - t) ** 2),
    "l2_loss": (lambda r, s: (_x(r, (4, 6), s), _x(r, (4, 6), s)),
                lambda p, t: 0.5 * (p - t) ** 2),
    "huber_loss": (lambda r, s: (_x(r, (4, 6), s), _x(r, (4, 6), s)),
                   lambda p, t: ref_huber(p - t)),
    "log_cosh": (lambda r, s: (_x(r, (4, 6), s), _x(r, (4, 6), s)),
                 lambda p, t: ref_log_cosh(p - t)),
    "cosine_similarity": (lambda r, s: (_x(r, (4, 6), s), _x(r, (4, 6), s)), ref_cosine),
    "cosine_distance": (lambda r, s: (_x(r, (4, 6), s), _x(r, (4, 6), s)),
                        lambda a, b: 1 - ref_cosine(a, b)),
    "ranking_softmax_loss": (lambda r, s: (_x(r, (4, 6), s), r.integers(0, 3, (4, 6)).astype(float)),
                             ref_ranking),
    "ntxent": (lambda r, s: (_x(r, (6, 4), s), np.array([0, 0, 1, 1, 2, 2])), ref_ntxent),
    "triplet_margin_loss": (lambda r, s: tuple(_x(r, (4, 6), s) for _ in range(3)), ref_triplet),
    "dice_loss": (lambda r, s: (_x(r, (2, 3, 3, 4), s), _onehot(r, (2, 3, 3, 4))), ref_dice),
    "smooth_labels": (lambda r, s: (_onehot(r, (4, 6)), 0.1), ref_smooth),
}

SCALES = [1.0, 1e4]
DTYPES = [jnp.float32, jnp.bfloat16]


def _to_jax(value, dtype):
  if isinstance(value, np.ndarray) and np.issubdtype(value.dtype, np.floating):
    return jnp.asarray(value, dtype)
  if isinstance(value, np.ndarray):
    return jnp.asarray(value, jnp.int32)
  return value


@functools.lru_cache(maxsize=None)
def _jitted(name):
  return jax.jit(getattr(losses, name))


def _tolerance(name, dtype, scale):
  # Float32 arithmetic on values of size `scale` loses ~eps * scale in absolute terms (squared
  # errors: eps * scale^2); bfloat16 output adds its rounding, 2^-8 relative.
  eps32 = float(np.finfo(np.float32).eps)
  rtol = 1e-5 if dtype == jnp.float32 else 2 ** -7
  size = scale * scale if name in ("squared_error", "l2_loss") else scale
  return rtol, 16 * eps32 * size


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "bf16"])
@pytest.mark.parametrize("scale", SCALES, ids=["1", "1e4"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_float64_reference(name, scale, dtype):
  build, reference = CASES[name]
  args64 = build(np.random.default_rng(0), scale)
  args = tuple(_to_jax(a, dtype) for a in args64)
  out = _jitted(name)(*args)
  assert out.dtype == dtype, f"{name}: {dtype.__name__} in, {out.dtype} out"
  assert np.all(np.isfinite(to_f64(out))), name
  # The reference sees exactly the values the loss saw (rounded to the input dtype).
  exact = tuple(to_f64(a) if isinstance(a, jax.Array) and jnp.issubdtype(a.dtype, jnp.floating)
                else (np.asarray(a) if isinstance(a, jax.Array) else a) for a in args)
  expected = reference(*exact)
  rtol, atol = _tolerance(name, dtype, scale)
  np.testing.assert_allclose(to_f64(out), expected, rtol=rtol, atol=atol, err_msg=name)


GRAD_CASES = [
    "softmax_cross_entropy", "safe_softmax_cross_entropy",
    "softmax_cross_entropy_with_integer_labels", "poly_loss_cross_entropy",
    "sigmoid_binary_cross_entropy", "sigmoid_focal_loss", "kl_divergence",
    "generalized_kl_divergence", "kl_divergence_with_log_targets", "multiclass_sparsemax_loss",
    "log_cosh", "huber_loss", "cosine_similarity", "ranking_softmax_loss", "ntxent",
    "triplet_margin_loss", "dice_loss",
]


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "bf16"])
@pytest.mark.parametrize("name", GRAD_CASES)
def test_gradients_finite_at_large_scale(name, dtype):
  build, _ = CASES[name]
  args = tuple(_to_jax(a, dtype) for a in build(np.random.default_rng(1), 1e4))
  fn = getattr(losses, name)
  grad = jax.jit(jax.grad(lambda x, *rest: jnp.sum(fn(x, *rest).astype(jnp.float32))))(*args)
  assert grad.dtype == dtype
  assert np.all(np.isfinite(to_f64(grad))), name


def test_ctc_large_logits_and_bfloat16():
  rng = np.random.default_rng(2)
  logits = jnp.asarray(rng.normal(size=(2, 6, 4)) * 1e4, jnp.float32)
  labels = jnp.array([[1, 2, 2], [3, 1, 0]])
  label_paddings = jnp.array([[0.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
  logit_paddings = jnp.zeros((2, 6))
  for dtype in DTYPES:
    x = logits.astype(dtype)
    loss = losses.ctc_loss(x, logit_paddings, labels, label_paddings)
    assert loss.dtype == dtype and np.all(np.isfinite(to_f64(loss)))
    grad = jax.grad(lambda z: jnp.sum(losses.ctc_loss(z, logit_paddings, labels,
                                                      label_paddings).astype(jnp.float32)))(x)
    assert grad.dtype == dtype and np.all(np.isfinite(to_f64(grad)))


@pytest.mark.parametrize("name", ["softmax_cross_entropy", "sigmoid_binary_cross_entropy",
                                  "huber_loss", "kl_divergence", "cosine_similarity"])
def test_output_dtype_is_the_promotion_of_floating_inputs(name):
  build, _ = CASES[name]
  a, b = build(np.random.default_rng(3), 1.0)
  out = getattr(losses, name)(jnp.asarray(a, jnp.bfloat16), jnp.asarray(b, jnp.float32))
  assert out.dtype == jnp.float32
  if X64:
    out = getattr(losses, name)(jnp.asarray(a, jnp.float64), jnp.asarray(b, jnp.float64))
    assert out.dtype == jnp.float64


def test_integer_labels_do_not_widen():
  logits = jnp.asarray([[1.0, -2.0], [0.5, 0.0]], jnp.bfloat16)
  assert losses.sigmoid_binary_cross_entropy(logits, jnp.array([[1, 0], [0, 1]])).dtype == (
      jnp.bfloat16)
  assert losses.softmax_cross_entropy_with_integer_labels(logits, jnp.array([0, 1])).dtype == (
      jnp.bfloat16)
  assert losses.multiclass_hinge_loss(logits, jnp.array([0, 1])).dtype == jnp.bfloat16


def test_ntxent_keeps_the_digits_of_large_similarities():
  # Optax's docstring example: one-dimensional embeddings of one sign, so every similarity is
  # 1 / 0.07 and each positive pair's loss is log(1 + 2 negatives) = log 3. The loss is a difference
  # of two logits near 15 unless computed as softplus(lse(negatives) - positive): the difference
  # form lost 4 float32 ulps (1.0986118 for 1.0986123).
  e = jnp.array([[0.3], [1.2], [2.0], [0.7]], jnp.float32)
  out = losses.ntxent(e, jnp.array([0, 0, 1, 1]))
  assert abs(float(out) - np.log(3.0)) <= float(np.spacing(np.float32(np.log(3.0))))
