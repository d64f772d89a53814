"""Property tests (hypothesis): identities and bounds the losses satisfy by definition.

Shapes are fixed so each jitted function compiles once; examples are few and deadline-free.
"""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from jax.scipy.special import logsumexp
from scipy import special

from steadax import losses

from .test_stability import ref_sparsemax

FEW = settings(max_examples=25, deadline=None)
K = 5


def floats(low=-20.0, high=20.0):
  return st.floats(float(np.float32(low)), float(np.float32(high)), width=32, allow_nan=False,
                   allow_infinity=False)


def arrays(shape, low=-20.0, high=20.0):
  return hnp.arrays(np.float32, shape, elements=floats(low, high))


labels_strategy = hnp.arrays(np.int32, (4,), elements=st.integers(0, K - 1))

softmax_ce = jax.jit(losses.softmax_cross_entropy)
int_ce = jax.jit(losses.softmax_cross_entropy_with_integer_labels)
int_ce_grad = jax.jit(jax.grad(lambda x, y: jnp.sum(losses.softmax_cross_entropy_with_integer_labels(x, y))))
safe_ce = jax.jit(losses.safe_softmax_cross_entropy)
poly = jax.jit(losses.poly_loss_cross_entropy)
fy_logsumexp = jax.jit(losses.make_fenchel_young_loss(logsumexp))


@FEW
@given(arrays((4, K)), labels_strategy)
def test_cross_entropy_forms_agree_and_equal_minus_log_softmax(logits, labels):
  onehot = jax.nn.one_hot(labels, K, dtype=jnp.float32)
  expected = -np.take_along_axis(special.log_softmax(logits.astype(np.float64), -1),
                                 labels[:, None].astype(np.int64), -1)[:, 0]
  for value in (int_ce(logits, labels), softmax_ce(logits, onehot), safe_ce(logits, onehot),
                poly(logits, onehot, epsilon=0.0), fy_logsumexp(logits, onehot)):
    np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-5)
  assert np.all(np.asarray(int_ce(logits, labels)) >= 0)


@FEW
@given(arrays((4, K)), labels_strategy)
def test_integer_cross_entropy_gradient_is_softmax_minus_onehot(logits, labels):
  expected = special.softmax(logits.astype(np.float64), -1) - np.eye(K)[labels]
  np.testing.assert_allclose(int_ce_grad(logits, labels), expected, atol=1e-5)


@FEW
@given(arrays((4, K)), arrays((4, K), 0.0, 1.0))
def test_cross_entropy_of_distributions_is_nonnegative(logits, weights):
  labels = weights / np.maximum(weights.sum(-1, keepdims=True), 1e-3)
  assert np.all(np.asarray(softmax_ce(logits, labels)) >= -1e-5)


huber = jax.jit(losses.huber_loss)
huber_grad = jax.jit(jax.grad(lambda x, d: jnp.sum(losses.huber_loss(x, delta=d))))
l2 = jax.jit(losses.l2_loss)
sq = jax.jit(losses.squared_error)


@FEW
@given(arrays((6,), -5.0, 5.0), floats(0.1, 3.0))
def test_huber_is_quadratic_then_linear(x, delta):
  x64, d = x.astype(np.float64), np.float64(np.float32(delta))
  value = np.asarray(huber(x, delta=delta))
  small = np.abs(x64) <= d
  np.testing.assert_allclose(value[small], 0.5 * x64[small] ** 2, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(value[~small], d * (np.abs(x64[~small]) - 0.5 * d), rtol=1e-5,
                             atol=1e-5)
  np.testing.assert_allclose(huber_grad(x, delta), np.clip(x64, -d, d), rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(l2(x), 0.5 * np.asarray(sq(x)), rtol=1e-6)


log_cosh = jax.jit(losses.log_cosh)


@FEW
@given(arrays((6,), -60.0, 60.0), floats(-30.0, 0.0))
def test_log_cosh_is_accurate_and_symmetric(x, log_scale):
  # Tiny errors (down to 1e-30 scale) are where log(cosh(x)) formed naively loses everything.
  x = (x * np.float32(10.0 ** (log_scale / 3))).astype(np.float32)
  x64 = x.astype(np.float64)
  a = np.abs(x64)
  expected = np.where(a < 1, np.log1p(2 * np.sinh(a / 2) ** 2),
                      a + np.log1p(np.exp(-2 * np.minimum(a, 700))) - math.log(2))
  value = np.asarray(log_cosh(x))
  np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-37)
  np.testing.assert_array_equal(value, np.asarray(log_cosh(-x)))


kl = jax.jit(losses.kl_divergence)
gkl = jax.jit(losses.generalized_kl_divergence)
kl_log = jax.jit(losses.kl_divergence_with_log_targets)


@FEW
@given(arrays((3, K), -5.0, 5.0), arrays((3, K), -5.0, 5.0))
def test_kl_divergences_are_nonnegative_and_vanish_on_equal_inputs(a, b):
  log_p, log_t = jax.nn.log_softmax(a), jax.nn.log_softmax(b)
  t = jnp.exp(log_t)
  assert np.all(np.asarray(kl(log_p, t)) >= -1e-5)
  np.testing.assert_allclose(kl(log_t, t), 0.0, atol=1e-5)
  np.testing.assert_allclose(kl_log(log_p, log_t), kl(log_p, t), rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(gkl(log_p, t), kl(log_p, t), rtol=1e-4, atol=1e-5)


smooth = jax.jit(losses.smooth_labels)


@FEW
@given(labels_strategy, floats(0.0, 1.0))
def test_smoothed_labels_remain_distributions(labels, alpha):
  out = np.asarray(smooth(jax.nn.one_hot(labels, K, dtype=jnp.float32), alpha))
  np.testing.assert_allclose(out.sum(-1), 1.0, rtol=1e-6)
  assert np.all(out >= 0)


mc_sparsemax = jax.jit(losses.multiclass_sparsemax_loss)
mc_sparsemax_grad = jax.jit(jax.grad(lambda s, y: jnp.sum(losses.multiclass_sparsemax_loss(s, y))))


@FEW
@given(arrays((4, K), -3.0, 3.0), labels_strategy)
def test_sparsemax_loss_is_nonnegative_with_gradient_p_minus_onehot(scores, labels):
  assert np.all(np.asarray(mc_sparsemax(scores, labels)) >= -1e-6)
  expected = ref_sparsemax(scores.astype(np.float64)) - np.eye(K)[labels]
  np.testing.assert_allclose(mc_sparsemax_grad(scores, labels), expected, atol=1e-5)


bce = jax.jit(losses.sigmoid_binary_cross_entropy)
focal = jax.jit(losses.sigmoid_focal_loss)
hinge = jax.jit(losses.hinge_loss)
perceptron = jax.jit(losses.perceptron_loss)


@FEW
@given(arrays((6,), -40.0, 40.0), hnp.arrays(np.float32, (6,), elements=st.sampled_from([0.0, 1.0])))
def test_binary_losses(x, y):
  expected = y * np.logaddexp(0, -x.astype(np.float64)) + (1 - y) * np.logaddexp(0, x)
  np.testing.assert_allclose(bce(x, y), expected, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(focal(x, y, gamma=0.0), expected, rtol=1e-5, atol=1e-6)
  assert np.all(np.asarray(focal(x, y)) <= np.asarray(bce(x, y)) + 1e-6)
  signs = 2 * y - 1
  h, p = np.asarray(hinge(x, signs)), np.asarray(perceptron(x, signs))
  assert np.all(h >= p) and np.all(p >= 0)


cos = jax.jit(losses.cosine_similarity)


@FEW
@given(arrays((3, 4), -5.0, 5.0), arrays((3, 4), -5.0, 5.0), floats(0.5, 100.0))
def test_cosine_similarity_is_bounded_and_scale_invariant(a, b, c):
  a, b = a + 0.1, b - 0.1  # keep norms away from 0
  value = np.asarray(cos(a, b))
  assert np.all(np.abs(value) <= 1 + 1e-5)
  np.testing.assert_allclose(cos(a * np.float32(c), b), value, rtol=1e-4, atol=1e-5)


def _ctc_brute_force(logits, labels, blank):
  """-log sum over every frame-wise path whose collapse gives ``labels``."""
  log_probs = special.log_softmax(logits.astype(np.float64), -1)
  frames, classes = log_probs.shape
  total = []
  for path in itertools.product(range(classes), repeat=frames):
    collapsed = [c for i, c in enumerate(path) if c != blank and (i == 0 or c != path[i - 1])]
    if collapsed == list(labels):
      total.append(sum(log_probs[t, c] for t, c in enumerate(path)))
  return -special.logsumexp(total) if total else math.inf


ctc = jax.jit(losses.ctc_loss, static_argnames="blank_id")


@FEW
@given(arrays((4, 3), -3.0, 3.0),
       st.lists(st.integers(1, 2), min_size=0, max_size=3), st.integers(4, 5))
def test_ctc_equals_sum_over_alignments(logits, label_list, frames):
  logits = np.concatenate([logits, np.zeros((1, 3), np.float32)])[:frames]
  padded = label_list + [0] * (3 - len(label_list))
  label_paddings = np.array([[0.0] * len(label_list) + [1.0] * (3 - len(label_list))],
                            np.float32)
  # Frames beyond `frames` are padding; the padded logits must not matter.
  x = np.concatenate([logits, np.full((5 - frames, 3), 7.0, np.float32)])[None]
  logit_paddings = np.array([[0.0] * frames + [1.0] * (5 - frames)], np.float32)
  value = float(ctc(x, logit_paddings, np.array([padded], np.int32), label_paddings)[0])
  expected = _ctc_brute_force(logits, label_list, blank=0)
  if math.isinf(expected):
    assert value > 1e4
  else:
    np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-5)
