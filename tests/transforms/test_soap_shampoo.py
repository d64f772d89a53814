"""SOAP and Shampoo: their defining properties, blocking, grafting, schedules and convergence."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax

X64 = bool(jax.config.jax_enable_x64)


def _normal(seed, shape):
  return jnp.asarray(np.random.default_rng(seed).normal(size=shape), jnp.float32)


def _complex_normal(seed, shape):
  return jax.lax.complex(_normal(seed, shape), _normal(seed + 1000, shape))


@jax.jit
def _scan_updates(tx, grads, params):
  def body(state, g):
    u, state = tx.update(g, state, params)
    return state, (u, state)

  return jax.lax.scan(body, tx.init(jax.tree_util.tree_map(lambda g: g[0], grads)
                                    if params is None else params), grads)[1]


def _run_updates(tx, grads, params=None):
  """The updates and states of ``tx`` fed ``grads`` one after the other (one compiled scan)."""
  stacked = jax.tree_util.tree_map(lambda *g: jnp.stack(g), *grads)
  updates, states = _scan_updates(tx, stacked, params)
  at = lambda tree, t: jax.tree_util.tree_map(lambda x: x[t], tree)
  return [at(updates, t) for t in range(len(grads))], [at(states, t) for t in range(len(grads))]


# --------------------------------------------------------------------------------------------------
# SOAP


@pytest.mark.parametrize("kind", ["real", "complex"])
def test_soap_is_adam_in_the_fixed_eigenbasis(kind):
  """Vyas et al. 2024, Algorithm 3: with the eigenbasis held fixed (computed once, after the first
  update; precondition_frequency larger than the run), every later SOAP update is Adam's update on
  the rotated gradients ``Q_L^H G Q_R``, rotated back ``Q_L N Q_R^H``."""
  make = _complex_normal if kind == "complex" else _normal
  grads = [make(10 + t, (5, 3)) for t in range(8)]
  b1, b2, eps = 0.9, 0.95, 1e-6
  soap = steadax.scale_by_soap(b1, b2, shampoo_beta=0.8, eps=eps, precondition_frequency=1000)
  updates, states = _run_updates(soap, grads)
  np.testing.assert_array_equal(updates[0], np.zeros((5, 3)))
  work = np.complex128 if kind == "complex" else np.float64
  # eigenbases[k] diagonalises the mode-k statistic G_(k) G_(k)^H; for the columns that is
  # conj(G^H G), so Q_R (the eigenvectors of G^H G) is its conjugate.
  q_left = np.asarray(states[0].eigenbases[0], work)
  q_right = np.conj(np.asarray(states[0].eigenbases[1], work))
  # The basis is the eigenbasis of the first statistics, and it is not the identity.
  stat = np.asarray(states[0].statistics[0], work)
  rotated = q_left.conj().T @ stat @ q_left
  assert np.abs(rotated - np.diag(np.diag(rotated))).max() < 1e-4 * np.abs(stat).max()
  assert np.abs(q_left - np.eye(5)).max() > 0.1
  for s in states[1:]:
    np.testing.assert_array_equal(s.eigenbases[0], states[0].eigenbases[0])

  adam = steadax.scale_by_adam(b1, b2, eps)
  adam_state = adam.init(grads[0])
  for t in range(1, len(grads)):
    g = np.asarray(grads[t], work)
    g_rot = jnp.asarray(q_left.conj().T @ g @ q_right, grads[t].dtype)
    n, adam_state = adam.update(g_rot, adam_state)
    expected = q_left @ np.asarray(n, work) @ q_right.conj().T
    np.testing.assert_allclose(np.asarray(updates[t], work), expected, rtol=2e-4, atol=2e-5)


def test_soap_vectors_get_adam_one_step_late():
  """Vectors are not rotated (precondition_1d=False): SOAP is Adam, started one update later."""
  grads = [_normal(30 + t, (4,)) for t in range(6)]
  soap_updates, _ = _run_updates(steadax.scale_by_soap(0.9, 0.99, eps=1e-6), grads)
  adam_updates, _ = _run_updates(steadax.scale_by_adam(0.9, 0.99, eps=1e-6), grads[1:])
  np.testing.assert_array_equal(soap_updates[0], np.zeros(4))
  for ours, theirs in zip(soap_updates[1:], adam_updates):
    # Adam computes 1 - b and its bias corrections as Optax does (issue 35 §1); SOAP's own Adam
    # rounds them to float32 first until it takes the same arithmetic: 1e-6 relative apart.
    np.testing.assert_allclose(ours, theirs, rtol=1e-5)


def test_soap_eigenbases_refresh_on_schedule_and_diagonalise_the_statistics():
  soap = steadax.scale_by_soap(precondition_frequency=3)
  grads = [_normal(40 + t, (4, 3)) for t in range(8)]
  _, states = _run_updates(soap, grads)
  changed = [not np.array_equal(states[t].eigenbases[0], states[t - 1].eigenbases[0]) for t in range(1, 8)]
  # Counts 1, 4, 7 refresh (the first update is states[0]).
  assert changed == [False, False, True, False, False, True, False]
  s, q = np.asarray(states[6].statistics[1], np.float64), np.asarray(states[6].eigenbases[1], np.float64)
  d = q.T @ s @ q
  assert np.abs(d - np.diag(np.diag(d))).max() < 1e-5 * np.abs(s).max()
  assert np.all(np.diff(np.diag(d)) <= 1e-6 * np.abs(s).max())  # decreasing eigenvalues
  np.testing.assert_allclose(q.T @ q, np.eye(3), atol=1e-5)


def test_soap_long_axes_keep_the_identity_and_dtypes_are_explicit():
  params = {"w": jnp.zeros((6, 3), jnp.bfloat16), "b": jnp.zeros(3, jnp.bfloat16)}
  tx = steadax.scale_by_soap(max_precond_dim=4, statistics_dtype=jnp.float64 if X64 else jnp.float32,
                             eigenbasis_dtype=jnp.bfloat16)
  state = tx.init(params)
  assert [s.shape for s in state.statistics["w"]] == [(0, 0), (3, 3)]
  assert state.statistics["w"][1].dtype == (jnp.float64 if X64 else jnp.float32)
  assert state.eigenbases["w"][1].dtype == jnp.bfloat16
  assert state.statistics["b"][0].shape == (0, 0)
  default = steadax.scale_by_soap().init(params)
  assert default.statistics["w"][0].dtype == jnp.float32  # at least float32 for bfloat16 params


def test_soap_rejects_bad_arguments():
  with pytest.raises(ValueError, match="scale_by_soap: precondition_frequency"):
    steadax.scale_by_soap(precondition_frequency=0)
  with pytest.raises(ValueError, match="scale_by_soap: shampoo_beta"):
    steadax.scale_by_soap(shampoo_beta=1.5)


# --------------------------------------------------------------------------------------------------
# Shampoo


def _inverse_root_reference(s, exponent, eps):
  values, vectors = np.linalg.eigh(s)
  values = np.maximum(values, 0.0) + eps * values.max()
  return (vectors * values ** (-1.0 / exponent)) @ vectors.conj().T


def test_shampoo_direction_is_the_kronecker_inverse_root():
  """Gupta et al. 2018, Algorithm 1: ``L^{-1/4} G R^{-1/4}`` with ``L``, ``R`` the (here
  exponentially averaged) sums of ``G G^T`` and ``G^T G``, computed independently in float64."""
  grads = [_normal(50 + t, (4, 3)) for t in range(3)]
  beta, eps = 0.7, 1e-6
  tx = steadax.scale_by_shampoo(b1=0.0, shampoo_beta=beta, matrix_eps=eps, precondition_frequency=1,
                                graft_type="none")
  updates, _ = _run_updates(tx, grads)
  left, right = np.zeros((4, 4)), np.zeros((3, 3))
  for g, u in zip(grads, updates):
    g = np.asarray(g, np.float64)
    left = beta * left + (1 - beta) * g @ g.T
    right = beta * right + (1 - beta) * g.T @ g
    expected = _inverse_root_reference(left, 4, eps) @ g @ _inverse_root_reference(right, 4, eps)
    np.testing.assert_allclose(u, expected, rtol=2e-3, atol=1e-4)


def test_shampoo_blocks_are_preconditioned_independently():
  """Anil et al. 2020, §3.3: a (4, 6) weight in 2x2 blocks is six independent 2x2 Shampoo problems."""
  grads = [_normal(60 + t, (4, 6)) for t in range(4)]
  blocked, _ = _run_updates(steadax.scale_by_shampoo(block_size=2, precondition_frequency=2), grads)
  blocks = [(slice(2 * i, 2 * i + 2), slice(2 * j, 2 * j + 2)) for i in range(2) for j in range(3)]
  # One tree holding the six blocks as separate parameters, optimized without blocking.
  alone, _ = _run_updates(steadax.scale_by_shampoo(precondition_frequency=2),
                          [[g[rows, cols] for rows, cols in blocks] for g in grads])
  for u, v in zip(blocked, alone):
    for (rows, cols), v_block in zip(blocks, v):
      np.testing.assert_allclose(u[rows, cols], v_block, rtol=1e-4, atol=1e-6)


def test_shampoo_padded_block_equals_the_zero_padded_problem():
  """The last block of a (3, 2) weight with block_size=2 is zero-padded to 2x2; padding is exact."""
  grads = [_normal(70 + t, (3, 2)) for t in range(3)]
  blocked, _ = _run_updates(steadax.scale_by_shampoo(block_size=2, precondition_frequency=1), grads)
  padded = [jnp.concatenate([g[2:], jnp.zeros((1, 2), jnp.float32)]) for g in grads]
  alone, _ = _run_updates(steadax.scale_by_shampoo(precondition_frequency=1), padded)
  for u, v in zip(blocked, alone):
    np.testing.assert_allclose(u[2:], v[:1], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("graft_type", ["adam", "sgd"])
def test_shampoo_grafting_takes_the_norm_of_each_block(graft_type):
  """Anil et al. 2020, §3.2: each block steps along Shampoo's direction with the norm of Adam's step
  (or of the momentum, for SGD grafting)."""
  grads = [_normal(80 + t, (4, 6)) for t in range(3)]
  updates, _ = _run_updates(steadax.scale_by_shampoo(block_size=3, graft_type=graft_type), grads)
  if graft_type == "adam":
    ref_updates, _ = _run_updates(steadax.scale_by_adam(), grads)
  else:  # the bias-corrected momentum
    m, ref_updates = np.zeros((4, 6)), []
    for t, g in enumerate(grads):
      m = 0.9 * m + 0.1 * np.asarray(g, np.float64)
      ref_updates.append(m / (1 - 0.9 ** (t + 1)))
  for u, r in zip(updates, ref_updates):
    u, r = np.asarray(u, np.float64), np.asarray(r, np.float64)
    for rows in (slice(0, 3), slice(3, 4)):
      for cols in (slice(0, 3), slice(3, 6)):
        np.testing.assert_allclose(np.linalg.norm(u[rows, cols]), np.linalg.norm(r[rows, cols]), rtol=1e-4)
    # ... but not along Adam's direction.
    cosine = np.sum(u * r) / (np.linalg.norm(u) * np.linalg.norm(r))
    assert cosine < 0.99


def test_shampoo_vectors_scalars_and_empty_leaves_get_adam():
  params = {"v": _normal(90, (5,)), "s": jnp.asarray(0.3, jnp.float32), "e": jnp.zeros((0, 3))}
  grads = [jax.tree_util.tree_map(lambda x, t=t: x * (1.0 + t) - 0.2, params) for t in range(3)]
  ours, _ = _run_updates(steadax.scale_by_shampoo(b1=0.8, b2=0.95), grads, params)
  theirs, _ = _run_updates(steadax.scale_by_adam(0.8, 0.95), grads, params)
  for u, v in zip(ours, theirs):
    for k in params:
      np.testing.assert_allclose(u[k], v[k], rtol=1e-6)


def test_shampoo_preconditioners_refresh_on_schedule():
  tx = steadax.scale_by_shampoo(precondition_frequency=4)
  _, states = _run_updates(tx, [_normal(95 + t, (3, 3)) for t in range(9)])
  changed = [not np.array_equal(states[t].preconditioners[0], states[t - 1].preconditioners[0])
             for t in range(1, 9)]
  assert changed == [False, False, False, True, False, False, False, True]
  assert [s.shape for s in states[0].statistics] == [(1, 3, 3), (1, 3, 3)]


def test_shampoo_rejects_bad_arguments():
  with pytest.raises(ValueError, match="scale_by_shampoo: graft_type"):
    steadax.scale_by_shampoo(graft_type="adagrad")
  with pytest.raises(ValueError, match="scale_by_shampoo: block_size"):
    steadax.scale_by_shampoo(block_size=0)


# --------------------------------------------------------------------------------------------------
# Convergence on a quadratic with a known Kronecker Hessian ``B (x) A`` (ill-conditioned and rotated,
# so that a diagonal preconditioner cannot undo it).


def _spd(eigenvalues, seed):
  q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(len(eigenvalues), len(eigenvalues))))
  return (q * np.asarray(eigenvalues)) @ q.T


_A = jnp.asarray(_spd(np.logspace(0, 2, 6), 0), jnp.float32)
_B = jnp.asarray(_spd(np.logspace(0, 1.5, 4), 1), jnp.float32)
_T = _normal(2, (6, 4))


def _kron_loss(w):
  e = w - _T
  return 0.5 * jnp.sum(e * (_A @ e @ _B))


_LEARNING_RATES = jnp.asarray([0.01, 0.03, 0.1, 0.3, 1.0, 3.0], jnp.float32)


def _steps_to_threshold(make, steps=150, threshold=1e-4):
  """For each learning rate of the grid, the first step whose loss is below threshold x initial."""
  w0 = jnp.zeros((6, 4), jnp.float32)

  def losses(lr):
    tx = make(lr)

    def body(carry, _):
      w, s = carry
      u, s = tx.update(jax.grad(_kron_loss)(w), s, w)
      return (steadax.apply_updates(w, u), s), _kron_loss(w)

    return jax.lax.scan(body, (w0, tx.init(w0)), None, length=steps)[1]

  curves = np.asarray(jax.jit(jax.vmap(losses))(_LEARNING_RATES))
  hit = curves < threshold * float(_kron_loss(w0))
  return np.where(hit.any(axis=1), hit.argmax(axis=1), steps), curves


def test_shampoo_with_exact_statistics_converges_faster_than_adam():
  """Gupta et al. 2018, Algorithm 1 (summed statistics, exact inverse fourth roots every step, no
  grafting or momentum) against Adam, each at its best learning rate of the same grid: Shampoo
  reaches 1e-4 of the initial loss in well under half of Adam's steps."""
  shampoo_steps, _ = _steps_to_threshold(lambda lr: steadax.shampoo(
      lr, b1=0.0, shampoo_beta=1.0, graft_type="none", precondition_frequency=1))
  adam_steps, _ = _steps_to_threshold(lambda lr: steadax.adam(lr))
  assert adam_steps.min() < 150  # Adam does converge on this problem
  assert shampoo_steps.min() < 0.5 * adam_steps.min(), (shampoo_steps, adam_steps)


def test_soap_and_grafted_shampoo_converge():
  """Convergence of the practical variants (EMA statistics, Adam grafting, refreshes every 10 steps)."""
  for make in (lambda lr: steadax.soap(lr, b1=0.9, b2=0.99, weight_decay=0.0),
               lambda lr: steadax.shampoo(lr)):
    steps, curves = _steps_to_threshold(make)
    assert steps.min() < 150, curves[:, -1]


@pytest.mark.parametrize("name, make, bytes_per_parameter", [
    ("adam", lambda: steadax.adam(0.1), 8.0),
    ("muon", lambda: steadax.contrib.muon(0.1), 4.0),
    ("galore", lambda: steadax.contrib.galore(0.1, rank=128), 1.5),
    ("soap", lambda: steadax.soap(0.1), 24.0),
    ("shampoo", lambda: steadax.shampoo(0.1), 24.0),
    ("shampoo_unblocked", lambda: steadax.shampoo(0.1, block_size=1024), 24.0),
])
def test_state_memory_per_parameter(name, make, bytes_per_parameter):
  """The documented state sizes (docs/optimizers.md) of a float32 1024x1024 matrix, from abstract
  values (no memory is allocated), up to a few bytes of counters and Muon's coefficients."""
  param = jax.ShapeDtypeStruct((1024, 1024), jnp.float32)
  state = jax.eval_shape(make().init, param)
  total = sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize for x in jax.tree_util.tree_leaves(state))
  assert 0 <= total - bytes_per_parameter * 1024 * 1024 < 64, (name, total)


@pytest.mark.parametrize("make, changes, match", [
    (steadax.scale_by_soap, {"b1": 1.0}, "scale_by_soap: b1"),
    (steadax.scale_by_soap, {"precondition_frequency": 0}, "scale_by_soap: precondition_frequency"),
    (steadax.scale_by_shampoo, {"matrix_eps": -1.0}, "scale_by_shampoo: matrix_eps"),
    (steadax.scale_by_shampoo, {"graft_type": "adagrad"}, "scale_by_shampoo: graft_type"),
])
def test_replace_validates_like_the_factory(make, changes, match):
  """Hyperparameters are checked by the class (hyper_field checks, static sizes in __post_init__),
  so ``.replace`` rejects what the factory rejects."""
  with pytest.raises(ValueError, match=match):
    make().replace(**changes)
