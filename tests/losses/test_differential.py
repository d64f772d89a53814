"""Differential tests: every loss of steadax.losses against optax.losses on random inputs.

Several shapes, ``axis`` and ``where`` variants per function. Optax runs under standard promotion
(it relies on it); steadax runs under the suite's strict promotion and rank rules.
"""

from __future__ import annotations

import functools
import inspect
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.scipy.special import logsumexp

import steadax
from steadax import losses

from ._helpers import X64, assert_close, optax_rules

F32 = dict(rtol=2e-5, atol=2e-5)
LOOSE = dict(rtol=1e-4, atol=1e-4)


def _rng(seed):
  return np.random.default_rng(seed)


def _normal(rng, shape, scale=1.0):
  return jnp.asarray(rng.normal(size=shape) * scale, jnp.float32)


def _dist(rng, shape, axis=-1):
  return jax.nn.softmax(_normal(rng, shape, 2.0), axis=axis)


def _mask(rng, shape, p=0.7):
  m = rng.random(shape) < p
  return jnp.asarray(m)


def _onehot(rng, shape):
  return jax.nn.one_hot(jnp.asarray(rng.integers(0, shape[-1], shape[:-1])), shape[-1],
                        dtype=jnp.float32)


# Each case: (id, function name, args builder taking an rng, keyword arguments, tolerance).
CASES = []


def case(name, build, tol=F32, ident=None, **kwargs):
  CASES.append(pytest.param(name, build, kwargs, tol, id=ident or name))


# Softmax cross entropy family.
for shape, axis in [((5,), -1), ((4, 7), -1), ((4, 7), 0), ((2, 3, 5), (1, 2))]:
  case("softmax_cross_entropy", lambda r, s=shape, a=axis: (_normal(r, s, 3), _dist(r, s, a)),
       ident=f"softmax_ce-{shape}-{axis}", axis=axis)
case("softmax_cross_entropy", lambda r: (_normal(r, (4, 6)), _onehot(r, (4, 6))),
     ident="softmax_ce-where-full", where=_mask(_rng(1), (4, 6)).at[0].set(False))
case("softmax_cross_entropy", lambda r: (_normal(r, (4, 6)), _onehot(r, (4, 6))),
     ident="softmax_ce-where-batch", where=jnp.array([True, False, True, True]))
case("softmax_cross_entropy", lambda r: (_normal(r, (3, 4, 5)), _dist(r, (3, 4, 5), 1)),
     ident="softmax_ce-where-axis1", axis=1, where=_mask(_rng(2), (3, 4, 5)))
case("safe_softmax_cross_entropy",
     lambda r: (_normal(r, (4, 6)).at[:, 0].set(-jnp.inf), _dist(r, (4, 6)).at[:, 0].set(0.0)))
case("safe_softmax_cross_entropy", lambda r: (_normal(r, (2, 3, 6)), _dist(r, (2, 3, 6))),
     ident="safe_ce-3d")
for shape, axis in [((6, 7), -1), ((7, 6), 0), ((2, 3, 4, 5), (2, 3)), ((2, 3, 4), (0, 2))]:
  def build_int(r, s=shape, a=axis):
    axes = (a,) if isinstance(a, int) else a
    axes = tuple(x % len(s) for x in axes)
    batch = tuple(d for i, d in enumerate(s) if i not in axes)
    n = int(np.prod([s[i] for i in axes]))
    return _normal(r, s, 3), jnp.asarray(r.integers(0, n, batch), jnp.int32)
  case("softmax_cross_entropy_with_integer_labels", build_int, ident=f"int_ce-{shape}-{axis}",
       axis=axis)
case("softmax_cross_entropy_with_integer_labels",
     lambda r: (_normal(r, (5, 6)), jnp.asarray(r.integers(0, 6, 5), jnp.int32)),
     ident="int_ce-where-full", where=_mask(_rng(3), (5, 6)).at[1].set(False))
case("softmax_cross_entropy_with_integer_labels",
     lambda r: (_normal(r, (5, 6)), jnp.asarray(r.integers(0, 6, 5), jnp.int32)),
     ident="int_ce-where-batch", where=jnp.array([True, True, False, True, False]))
case("poly_loss_cross_entropy", lambda r: (_normal(r, (4, 6), 2), _dist(r, (4, 6))))
case("poly_loss_cross_entropy", lambda r: (_normal(r, (4, 6), 2), _onehot(r, (4, 6))),
     ident="poly-eps-neg", epsilon=-1.0)
case("poly_loss_cross_entropy", lambda r: (_normal(r, (6, 4), 2), _dist(r, (6, 4), 0)),
     ident="poly-axis0-where", axis=0, where=_mask(_rng(4), (6, 4)))

# Sigmoid family.
case("sigmoid_binary_cross_entropy",
     lambda r: (_normal(r, (3, 5), 4), jnp.asarray(r.integers(0, 2, (3, 5)), jnp.int32)),
     ident="sigmoid_bce-int")
case("sigmoid_binary_cross_entropy",
     lambda r: (_normal(r, (3, 5), 4), jnp.asarray(r.random((3, 5)), jnp.float32)),
     ident="sigmoid_bce-soft")
case("sigmoid_binary_cross_entropy",
     lambda r: (_normal(r, (3, 5)), jnp.asarray(r.random((5,)), jnp.float32)),
     ident="sigmoid_bce-broadcast")
for alpha, gamma in [(None, 2.0), (0.25, 2.0), (0.25, 0.5), (None, 0.0)]:
  case("sigmoid_focal_loss",
       lambda r: (_normal(r, (4, 5), 4), jnp.asarray(r.integers(0, 2, (4, 5)), jnp.float32)),
       ident=f"focal-{alpha}-{gamma}", alpha=alpha, gamma=gamma)
case("sigmoid_focal_loss",
     lambda r: (_normal(r, (4, 5), 3), jnp.asarray(r.random((4, 5)), jnp.float32)),
     ident="focal-soft", alpha=0.3, gamma=1.5)

# Margin losses.
def _pm1(r, shape):
  return jnp.asarray(r.choice([-1.0, 1.0], shape), jnp.float32)


case("hinge_loss", lambda r: (_normal(r, (4, 3)), _pm1(r, (4, 3))))
case("perceptron_loss", lambda r: (_normal(r, (4, 3)), _pm1(r, (4, 3))))
case("sparsemax_loss", lambda r: (_normal(r, (4, 3), 2), jnp.asarray(r.integers(0, 2, (4, 3)))))
for name in ["multiclass_hinge_loss", "multiclass_perceptron_loss", "multiclass_sparsemax_loss"]:
  case(name, lambda r: (_normal(r, (6, 5), 2), jnp.asarray(r.integers(0, 5, 6), jnp.int32)))

# Divergences.
for name in ["kl_divergence", "generalized_kl_divergence", "convex_kl_divergence"]:
  case(name, lambda r: (jnp.log(_dist(r, (3, 5))), _dist(r, (3, 5))))
  case(name, lambda r: (jnp.log(_dist(r, (5, 3), 0)), _dist(r, (5, 3), 0)),
       ident=f"{name}-axis0-where", axis=0, where=_mask(_rng(5), (5, 3)))
case("generalized_kl_divergence",
     lambda r: (_normal(r, (3, 5)), jnp.asarray(r.random((3, 5)) * 3, jnp.float32)),
     ident="generalized_kl-unnormalized", axis=None)
case("kl_divergence", lambda r: (jnp.log(_dist(r, (3, 5))), _dist(r, (3, 5)).at[:, 1].set(0.0)),
     ident="kl-zero-targets")
case("kl_divergence_with_log_targets",
     lambda r: (jnp.log(_dist(r, (3, 5))), jnp.log(_dist(r, (3, 5)))))
case("kl_divergence_with_log_targets",
     lambda r: (jnp.log(_dist(r, (2, 3, 4))), jnp.log(_dist(r, (2, 3, 4)))),
     ident="kl_log-axes-where", axis=(1, 2), where=_mask(_rng(6), (2, 3, 4)))

# Regression.
for name in ["squared_error", "l2_loss", "log_cosh"]:
  case(name, lambda r: (_normal(r, (4, 3), 3), _normal(r, (4, 3))))
  case(name, lambda r: (_normal(r, (7,)),), ident=f"{name}-no-targets")
for delta in [1.0, 0.3]:
  case("huber_loss", lambda r: (_normal(r, (4, 3), 2), _normal(r, (4, 3))),
       ident=f"huber-{delta}", delta=delta)
case("huber_loss", lambda r: (_normal(r, (4, 3), 2), _normal(r, (3,))), ident="huber-broadcast")
for name in ["cosine_similarity", "cosine_distance"]:
  case(name, lambda r: (_normal(r, (4, 6)), _normal(r, (4, 6))))
  case(name, lambda r: (_normal(r, (4, 6)), _normal(r, (4, 6))), ident=f"{name}-eps-axis0",
       epsilon=0.5, axis=0)
  case(name, lambda r: (_normal(r, (2, 3, 4)), _normal(r, (2, 3, 4))),
       ident=f"{name}-axes-where", axis=(1, 2), where=_mask(_rng(7), (2, 3, 4)))

# Ranking.
for reduce_fn in [jnp.mean, jnp.sum, None]:
  tag = getattr(reduce_fn, "__name__", "none")
  case("ranking_softmax_loss",
       lambda r: (_normal(r, (4, 5)), jnp.asarray(r.integers(0, 3, (4, 5)), jnp.float32)),
       ident=f"ranking-{tag}", reduce_fn=reduce_fn)
  case("ranking_softmax_loss",
       lambda r: (_normal(r, (4, 5)), jnp.asarray(r.integers(0, 3, (4, 5)), jnp.float32)),
       ident=f"ranking-where-weights-{tag}", reduce_fn=reduce_fn,
       where=_mask(_rng(8), (4, 5)).at[2].set(False), weights=jnp.linspace(0.5, 2.0, 5))
case("ranking_softmax_loss", lambda r: (_normal(r, (6,)), jnp.asarray(r.random(6), jnp.float32)),
     ident="ranking-1d")

# Self-supervised.
for temperature in [0.07, 0.5]:
  case("ntxent", lambda r: (_normal(r, (6, 4)), jnp.array([0, 0, 1, 1, 2, 2])), tol=LOOSE,
       ident=f"ntxent-{temperature}", temperature=temperature)
case("ntxent", lambda r: (_normal(r, (5, 3)), jnp.array([0, 1, 0, 1, 0])), tol=LOOSE,
     ident="ntxent-uneven")
for degree in [2, 4]:
  case("triplet_margin_loss", lambda r: tuple(_normal(r, (5, 3)) for _ in range(3)),
       ident=f"triplet-{degree}", norm_degree=degree, margin=0.5)
case("triplet_margin_loss", lambda r: tuple(_normal(r, (3, 5)) for _ in range(3)),
     ident="triplet-axis0", axis=0)

# Segmentation.
def _seg(r, shape=(2, 4, 4, 3)):
  return _normal(r, shape, 2), _onehot(r, shape)


case("dice_loss", _seg)
case("dice_loss", _seg, ident="dice-tversky-sum", alpha=0.3, beta=0.7, reduction="sum")
case("dice_loss", _seg, ident="dice-weights-none", class_weights=jnp.array([0.2, 1.0, 2.0]),
     reduction="none")
case("dice_loss", _seg, ident="dice-background-axis", ignore_background=True, axis=(1,))
case("dice_loss", lambda r: (_dist(r, (2, 4, 4, 3)), _onehot(r, (2, 4, 4, 3))),
     ident="dice-probabilities", apply_softmax=False)
case("dice_loss", lambda r: (_normal(r, (3, 5, 1)), jnp.asarray(r.integers(0, 2, (3, 5, 1)),
                                                                 jnp.float32)),
     ident="dice-binary-channel")
case("multiclass_generalized_dice_loss", _seg)
case("multiclass_generalized_dice_loss", _seg, ident="gdice-background", ignore_background=True)
case("binary_dice_loss",
     lambda r: (_normal(r, (3, 4, 4)), jnp.asarray(r.integers(0, 2, (3, 4, 4)), jnp.float32)))
case("binary_dice_loss",
     lambda r: (_normal(r, (3, 6, 1)), jnp.asarray(r.integers(0, 2, (3, 6, 1)), jnp.float32)),
     ident="binary_dice-channel", smooth=0.5)

# Smoothing.
case("smooth_labels", lambda r: (_onehot(r, (4, 5)), 0.1))
case("smooth_labels", lambda r: (_onehot(r, (2, 3, 4)), 0.2), ident="smooth-axes", axis=(1, 2))
case("smooth_labels", lambda r: (_onehot(r, (4, 5)), 0.3), ident="smooth-where",
     where=_mask(_rng(9), (4, 5)).at[:, 0].set(True))


def _run(fn, args, kwargs):
  """Both libraries run jitted: one compilation per case is cheaper than eager dispatch."""
  return jax.jit(functools.partial(fn, **kwargs))(*args)


@pytest.mark.parametrize("name,build,kwargs,tol", CASES)
def test_matches_optax(name, build, kwargs, tol):
  args = build(_rng(zlib.crc32(name.encode()) % 1000))
  if X64:  # the x64 run compares in float64, to a tight tolerance
    args = tuple(a.astype(jnp.float64) if isinstance(a, jax.Array) and a.dtype == jnp.float32
                 else a for a in args)
    tol = dict(rtol=1e-9, atol=1e-9)
  with optax_rules():
    if kwargs.get("apply_softmax") is False:  # Optax checks the values in Python: no jit
      expected = np.asarray(getattr(optax.losses, name)(*args, **kwargs))
    else:
      expected = np.asarray(_run(getattr(optax.losses, name), args, kwargs))
  if name == "convex_kl_divergence":
    with pytest.warns(DeprecationWarning, match="generalized_kl_divergence"):
      actual = _run(getattr(losses, name), args, kwargs)
  else:
    actual = _run(getattr(losses, name), args, kwargs)
  assert actual.dtype == expected.dtype or name.startswith("multiclass_")
  assert_close(actual, expected, what=name, **tol)


def _ctc_inputs(seed, blank_id=0):
  r = _rng(seed)
  batch, frames, classes, max_len = 3, 8, 5, 4
  logits = _normal(r, (batch, frames, classes), 2)
  label_ids = [c for c in range(classes) if c != blank_id]
  labels = jnp.asarray(r.choice(label_ids, (batch, max_len)), jnp.int32)
  labels = labels.at[0, 1].set(labels[0, 0])  # a repeated label needs a blank in between
  label_paddings = jnp.array([[0, 0, 0, 1], [0, 0, 0, 0], [0, 1, 1, 1]], jnp.float32)
  logit_paddings = jnp.array([[0] * 8, [0] * 6 + [1, 1], [0] * 3 + [1] * 5], jnp.float32)
  return logits, logit_paddings, labels, label_paddings


@pytest.mark.parametrize("blank_id", [0, 2])
def test_ctc_matches_optax(blank_id):
  args = _ctc_inputs(blank_id, blank_id)
  loss, blank, label = _run(losses.ctc_loss_with_forward_probs, args, dict(blank_id=blank_id))
  with optax_rules():
    ref_loss, ref_blank, ref_label = map(np.asarray, _run(
        optax.losses.ctc_loss_with_forward_probs, args, dict(blank_id=blank_id)))
  assert_close(loss, ref_loss, what="ctc loss", **LOOSE)
  assert blank.shape == ref_blank.shape and label.shape == ref_label.shape
  # Reachable states agree; unreachable ones only need to stay near log_epsilon (finite).
  for ours, theirs in [(blank, ref_blank), (label, ref_label)]:
    reachable = theirs > -1e4
    assert reachable.any()
    np.testing.assert_allclose(np.asarray(ours)[reachable], theirs[reachable], rtol=1e-4,
                               atol=1e-4)
    assert np.all(np.asarray(ours)[~reachable] < -1e4)
  assert_close(_run(losses.ctc_loss, args, dict(blank_id=blank_id)), ref_loss, what="ctc_loss",
               **LOOSE)


def test_ctc_infeasible_is_large_and_finite():
  # Three labels cannot be emitted in two frames: the probability is 0, the loss ~ -log_epsilon.
  logits = jnp.zeros((1, 2, 4))
  labels = jnp.array([[1, 2, 3]])
  args = (logits, jnp.zeros((1, 2)), labels, jnp.zeros((1, 3)))
  loss = _run(losses.ctc_loss, args, {})
  with optax_rules():
    ref = np.asarray(_run(optax.losses.ctc_loss, args, {}))
  assert np.isfinite(loss).all() and float(loss[0]) > 1e4 and float(ref[0]) > 1e4


@pytest.mark.parametrize("max_fun_name", ["logsumexp", "scaled"])
def test_fenchel_young_matches_optax(max_fun_name):
  r = _rng(11)
  scores, targets = _normal(r, (3, 4, 5)), _dist(r, (3, 4, 5))
  if max_fun_name == "logsumexp":
    max_fun, kwargs = logsumexp, {}
  else:
    def max_fun(s, temperature=1.0):
      return temperature * logsumexp(s / temperature)
    kwargs = {"temperature": 0.5}
  ours = _run(losses.make_fenchel_young_loss(max_fun), (scores, targets), kwargs)
  with optax_rules():
    theirs = np.asarray(_run(optax.losses.make_fenchel_young_loss(max_fun), (scores, targets),
                             kwargs))
  assert_close(ours, theirs, what="fenchel_young", **F32)


PUBLIC = sorted(n for n in dir(optax.losses) if not n.startswith("_"))


def test_same_names_as_optax():
  assert sorted(losses.__all__) == PUBLIC
  top = sorted(n for n in PUBLIC if hasattr(optax, n))
  for name in top:
    assert getattr(steadax, name) is getattr(losses, name), name


@pytest.mark.parametrize("name", PUBLIC)
def test_same_signature_as_optax(name):
  ours = inspect.signature(getattr(losses, name)).parameters
  theirs = inspect.signature(getattr(optax.losses, name)).parameters
  assert list(ours) == list(theirs)
  for key in theirs:
    assert ours[key].kind == theirs[key].kind, key
    assert ours[key].default is theirs[key].default or ours[key].default == theirs[key].default, key
