"""Input validation: clear errors naming the function and the argument, raised at trace time;
masked and degenerate inputs give finite values and gradients."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax
from steadax import losses

LOGITS = jnp.array([[1.0, 2.0, 3.0], [0.5, -0.5, 0.0]])
ONEHOT = jnp.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
INT_LABELS = jnp.array([2, 0])


def _raises(exc, fn_name, arg, call):
  """``call`` raises ``exc`` mentioning both names, eagerly and while tracing under jit."""
  pattern = rf"{fn_name}.*{arg}|{arg}.*{fn_name}"
  with pytest.raises(exc, match=pattern):
    call(lambda f: f)
  with pytest.raises(exc, match=pattern):
    call(jax.jit)


def test_integer_labels_must_be_integers():
  _raises(TypeError, "softmax_cross_entropy_with_integer_labels", "labels",
          lambda w: w(losses.softmax_cross_entropy_with_integer_labels)(LOGITS, ONEHOT[:, 0]))
  for name in ["multiclass_hinge_loss", "multiclass_perceptron_loss", "multiclass_sparsemax_loss"]:
    _raises(TypeError, name, "labels",
            lambda w, n=name: w(getattr(losses, n))(LOGITS, jnp.array([2.0, 0.0])))
  _raises(TypeError, "ctc_loss", "labels",
          lambda w: w(losses.ctc_loss)(jnp.zeros((1, 3, 3)), jnp.zeros((1, 3)),
                                       jnp.array([[1.0, 2.0]]), jnp.zeros((1, 2))))


def test_integer_labels_must_have_the_batch_shape():
  _raises(ValueError, "softmax_cross_entropy_with_integer_labels", "labels",
          lambda w: w(losses.softmax_cross_entropy_with_integer_labels)(
              LOGITS, jnp.array([0, 1, 2])))
  _raises(ValueError, "multiclass_hinge_loss", "labels",
          lambda w: w(losses.multiclass_hinge_loss)(LOGITS, jnp.array([[0], [1], [2]])))


def test_logits_must_be_floating():
  _raises(TypeError, "softmax_cross_entropy", "logits",
          lambda w: w(losses.softmax_cross_entropy)(jnp.array([[1, 2]]), jnp.array([[0.0, 1.0]])))
  _raises(TypeError, "sigmoid_binary_cross_entropy", "logits",
          lambda w: w(losses.sigmoid_binary_cross_entropy)(jnp.array([1, 2]), jnp.array([0, 1])))
  _raises(TypeError, "poly_loss_cross_entropy", "labels",
          lambda w: w(losses.poly_loss_cross_entropy)(LOGITS, jnp.array([[0, 0, 1], [1, 0, 0]])))


@pytest.mark.parametrize("name", ["softmax_cross_entropy", "poly_loss_cross_entropy",
                                  "softmax_cross_entropy_with_integer_labels"])
def test_where_must_be_a_boolean_mask_of_a_valid_shape(name):
  labels = INT_LABELS if "integer" in name else ONEHOT
  fn = getattr(losses, name)
  _raises(TypeError, name, "where",
          lambda w: w(lambda x, y: fn(x, y, where=jnp.ones((2, 3), jnp.int32)))(LOGITS, labels))
  _raises(ValueError, name, "where",
          lambda w: w(lambda x, y: fn(x, y, where=jnp.ones((3,), bool)))(LOGITS, labels))
  _raises(ValueError, name, "where",
          lambda w: w(lambda x, y: fn(x, y, where=jnp.ones((2, 4), bool)))(LOGITS, labels))


@pytest.mark.parametrize("name", ["kl_divergence", "cosine_similarity", "smooth_labels"])
def test_where_validated_for_broadcasting_losses(name):
  fn = getattr(losses, name)
  args = (ONEHOT, 0.1) if name == "smooth_labels" else (jnp.log(ONEHOT + 0.1), ONEHOT + 0.1)
  kw = lambda m: dict(where=m)
  with pytest.raises(TypeError, match=f"{name}.*where"):
    fn(*args, **kw(jnp.ones((2, 3), jnp.float32)))
  with pytest.raises(ValueError, match=f"{name}.*where"):
    fn(*args, **kw(jnp.ones((4,), bool)))


def test_shape_checks_name_both_arguments():
  with pytest.raises(ValueError, match="perceptron_loss.*predictor_outputs.*targets"):
    losses.perceptron_loss(jnp.ones(3), jnp.ones(2))
  with pytest.raises(ValueError, match="squared_error.*predictions.*targets"):
    losses.squared_error(jnp.ones((2, 3)), jnp.ones(3))
  with pytest.raises(ValueError, match="huber_loss.*predictions.*targets"):
    losses.huber_loss(jnp.ones((2, 3)), jnp.ones(2))
  with pytest.raises(ValueError, match="ntxent.*labels"):
    losses.ntxent(jnp.ones((4, 2)), jnp.array([0, 1, 0]))
  with pytest.raises(ValueError, match="sigmoid_focal_loss.*logits.*labels"):
    losses.sigmoid_focal_loss(jnp.ones(3), jnp.ones(2))


def test_axis_errors():
  with pytest.raises(ValueError, match="softmax_cross_entropy.*axis"):
    losses.softmax_cross_entropy(LOGITS, ONEHOT, axis=2)
  with pytest.raises(TypeError, match="softmax_cross_entropy_with_integer_labels.*axis"):
    losses.softmax_cross_entropy_with_integer_labels(LOGITS, INT_LABELS, axis=None)
  with pytest.raises(ValueError, match="kl_divergence.*axis"):
    losses.kl_divergence(LOGITS, ONEHOT, axis=(1, 1))


def test_ctc_shape_and_blank_errors():
  logits, lp, labels, lbp = jnp.zeros((2, 4, 3)), jnp.zeros((2, 4)), jnp.ones((2, 2), int), \
      jnp.zeros((2, 2))
  with pytest.raises(ValueError, match="ctc_loss.*logits.*rank 3"):
    losses.ctc_loss(logits[0], lp, labels, lbp)
  with pytest.raises(ValueError, match="ctc_loss.*logit_paddings"):
    losses.ctc_loss(logits, lp[:, :3], labels, lbp)
  with pytest.raises(ValueError, match="ctc_loss.*label_paddings"):
    losses.ctc_loss(logits, lp, labels, lbp[:, :1])
  with pytest.raises(ValueError, match="ctc_loss.*batch size"):
    losses.ctc_loss(logits, lp, labels[:1], lbp[:1])
  with pytest.raises(ValueError, match="ctc_loss_with_forward_probs.*blank_id"):
    losses.ctc_loss_with_forward_probs(logits, lp, labels, lbp, blank_id=3)


def test_dice_errors():
  x = jnp.zeros((2, 3, 3))
  t = jax.nn.one_hot(jnp.zeros((2, 3), int), 3)
  with pytest.raises(ValueError, match="dice_loss.*reduction"):
    losses.dice_loss(x, t, reduction="max")
  with pytest.raises(ValueError, match="dice_loss.*class_weights"):
    losses.dice_loss(x, t, class_weights=jnp.ones((3, 1)))
  with pytest.raises(ValueError, match="dice_loss.*apply_softmax=False"):
    losses.dice_loss(x + 0.5, t, apply_softmax=False)
  with pytest.raises(ValueError, match="dice_loss.*predictions.*targets"):
    losses.dice_loss(x, t[:, :2])


def test_binary_dice_accepts_probabilities():
  # Optax 0.2.8 rejects probabilities here (it asks a single channel to sum to 1).
  p = jnp.array([[0.9, 0.2, 0.7]])
  t = jnp.array([[1.0, 0.0, 1.0]])
  inter, total = 0.9 + 0.7, float(jnp.sum(p) + jnp.sum(t))
  expected = 1 - (inter + 1.0) / (0.5 * total + 1.0)
  np.testing.assert_allclose(losses.binary_dice_loss(p, t, apply_sigmoid=False), [expected],
                             rtol=1e-6)


def test_convex_kl_divergence_is_deprecated():
  with pytest.warns(DeprecationWarning, match="generalized_kl_divergence"):
    value = steadax.convex_kl_divergence(jnp.log(ONEHOT + 0.1), ONEHOT)
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    np.testing.assert_array_equal(value, losses.generalized_kl_divergence(jnp.log(ONEHOT + 0.1),
                                                                           ONEHOT))


def _finite_grad(fn, x):
  g = jax.grad(lambda z: jnp.sum(fn(z)))(x)
  assert np.all(np.isfinite(np.asarray(g))), g
  return g


def test_fully_masked_rows_give_zero_loss_and_finite_gradients():
  where = jnp.array([[True, False, True], [False, False, False]])
  ce = losses.softmax_cross_entropy(LOGITS, ONEHOT, where=where)
  assert float(ce[1]) == 0.0 and np.isfinite(float(ce[0]))
  g = _finite_grad(lambda x: losses.softmax_cross_entropy(x, ONEHOT, where=where), LOGITS)
  assert np.all(np.asarray(g)[1] == 0) and float(g[0, 1]) == 0.0
  _finite_grad(lambda x: losses.softmax_cross_entropy_with_integer_labels(x, INT_LABELS,
                                                                         where=where), LOGITS)
  _finite_grad(lambda x: losses.poly_loss_cross_entropy(x, ONEHOT, where=where), LOGITS)
  ranking = losses.ranking_softmax_loss(LOGITS, ONEHOT, where=jnp.zeros((2, 3), bool))
  assert float(ranking) == 0.0
  _finite_grad(lambda x: losses.ranking_softmax_loss(x, ONEHOT, where=where), LOGITS)


def test_zero_probability_conventions():
  # 0 log 0 = 0: -inf logits with zero labels, zero targets with -inf log-predictions.
  logits = LOGITS.at[:, 0].set(-jnp.inf)
  labels = ONEHOT.at[1].set(jnp.array([0.0, 1.0, 0.0]))
  assert np.all(np.isfinite(np.asarray(losses.safe_softmax_cross_entropy(logits, labels))))
  _finite_grad(lambda x: losses.safe_softmax_cross_entropy(x, labels), logits)
  log_p = jnp.log(jnp.array([[0.0, 0.5, 0.5]]))
  t = jnp.array([[0.0, 0.25, 0.75]])
  assert np.isfinite(float(losses.kl_divergence(log_p, t)[0]))
  assert np.isfinite(float(losses.kl_divergence_with_log_targets(log_p, jnp.log(t))[0]))
  _finite_grad(lambda lp: losses.kl_divergence(lp, t), jnp.log(jnp.array([[0.2, 0.3, 0.5]])))


def test_degenerate_batches():
  # No positive pair: 0 (Optax: NaN). No negative: each positive pair costs log(1) = 0.
  assert float(losses.ntxent(jnp.eye(3), jnp.array([0, 1, 2]))) == 0.0
  emb = jnp.array([[1.0, 0.0], [0.5, 0.5]])
  assert float(losses.ntxent(emb, jnp.array([0, 0]))) == 0.0
  _finite_grad(lambda e: losses.ntxent(e, jnp.array([0, 0])), emb)
  smoothed = losses.smooth_labels(ONEHOT, 0.1, where=jnp.array([[True, True, False],
                                                                [False, False, False]]))
  np.testing.assert_allclose(smoothed[0], [0.05, 0.05, 0.95], rtol=1e-6)
  np.testing.assert_allclose(smoothed[1], 0.9 * ONEHOT[1], rtol=1e-6)


def test_triplet_distance_uses_absolute_differences():
  a, p, n = jnp.zeros((1, 2)), jnp.array([[-1.0, -1.0]]), jnp.array([[3.0, 0.0]])
  # Degree 1: d(a, p) = 2 (Optax's signed sum would give -2), d(a, n) = 3.
  np.testing.assert_allclose(losses.triplet_margin_loss(a, p, n, norm_degree=1, eps=0.0),
                             [0.0], atol=1e-6)
  np.testing.assert_allclose(losses.triplet_margin_loss(a, p, n, norm_degree=1, margin=1.5,
                                                        eps=0.0), [0.5], rtol=1e-6)


def test_losses_under_jit_with_traced_hyperparameters():
  f = jax.jit(lambda x, y, eps, gamma, delta: (
      losses.poly_loss_cross_entropy(x, y, epsilon=eps),
      losses.sigmoid_focal_loss(x, y, gamma=gamma, alpha=0.25),
      losses.huber_loss(x, y, delta=delta)))
  out = f(LOGITS, ONEHOT, 1.0, 2.0, 0.5)
  ref = (losses.poly_loss_cross_entropy(LOGITS, ONEHOT, epsilon=1.0),
         losses.sigmoid_focal_loss(LOGITS, ONEHOT, gamma=2.0, alpha=0.25),
         losses.huber_loss(LOGITS, ONEHOT, delta=0.5))
  for a, b in zip(out, ref):
    np.testing.assert_allclose(a, b, rtol=1e-6)
