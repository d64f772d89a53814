"""Registry entries: orthogonalized and matrix-preconditioned optimizers (Muon, GaLore, SOAP, Shampoo,
and PSGD-Kron with dimension numbers; its plain entries are in entries_beyond.py).

Their problem is a quadratic in a 4x3 weight matrix with a Kronecker-factored Hessian ``B (x) A``
plus a bias vector, so the matrix code paths (orthogonalization, projection, eigenbases, blocks)
run in the progress and differential tests; the matrix test's mixed tree adds 2-D leaves of
shapes (3, 2), (2, 2), (1, 3) and (0, 3), vectors and scalars. The ``*_stacked`` entries take
dimension numbers with a batch axis (``_stacked_dims``): their problem is two such quadratics
stacked in one ``(2, 4, 3)`` weight, and in the matrix test every 2-D leaf is a batch of rows.
"""

import jax
import jax.numpy as jnp
import numpy as np

import steadax

from .registry import Entry, Problem


def _spd(eigenvalues, seed):
  q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(len(eigenvalues), len(eigenvalues))))
  return (q * np.asarray(eigenvalues)) @ q.T


_A = _spd([2.0, 1.0, 0.5, 0.25], 0).astype(np.float32)
_B = _spd([1.5, 1.0, 0.4], 1).astype(np.float32)
_TARGET = np.linspace(-0.6, 0.6, 12, dtype=np.float32).reshape(4, 3)
_BIAS = np.array([0.3, -0.2, 0.1], np.float32)


def _init():
  return {"w": jnp.asarray(np.linspace(1.0, -1.0, 12, dtype=np.float32).reshape(4, 3)[::-1].copy()),
          "b": jnp.array([0.8, -0.6, 0.4], jnp.float32)}


def _loss(params):
  e = params["w"].astype(jnp.float32) - jnp.asarray(_TARGET)
  r = params["b"].astype(jnp.float32) - jnp.asarray(_BIAS)
  return 0.5 * jnp.sum(e * (jnp.asarray(_A) @ e @ jnp.asarray(_B))) + 0.5 * jnp.sum(r * r)


KRONECKER = Problem("kronecker_quadratic", _loss, _init)


def _stacked_init():
  w = np.linspace(1.0, -1.0, 12, dtype=np.float32).reshape(4, 3)
  return {"w": jnp.asarray(np.stack([w[::-1], 0.5 * w])), "b": jnp.array([0.8, -0.6, 0.4], jnp.float32)}


def _stacked_loss(params):
  return _loss({"w": params["w"][0], "b": params["b"]}) + _loss({"w": params["w"][1], "b": jnp.asarray(_BIAS)})


STACKED = Problem("stacked_kronecker_quadratic", _stacked_loss, _stacked_init)


def _stacked_dims(params):
  """Layers stacked on axis 0: a 3-D weight is a batch of matrices, a 2-D leaf a batch of rows
  (vectors for SOAP, Shampoo and PSGD-Kron; ``(1, n)`` matrices for Muon and GaLore)."""
  dims = steadax.WeightDimensionNumbers
  return jax.tree_util.tree_map(lambda x: dims(1, 2) if x.ndim == 3 else (dims((), 1) if x.ndim == 2 else None),
                                params)


def _two_axis_dims(params):
  mdn = steadax.contrib.MuonDimensionNumbers
  return jax.tree_util.tree_map(lambda x: mdn(0, 1) if x.ndim == 2 else None, params)


ENTRIES = [
    Entry("muon", lambda: steadax.contrib.muon(0.05), lambda o: o.contrib.muon(0.05), problem=KRONECKER),
    Entry("muon_adaptive_spectral",
          lambda: steadax.contrib.muon(0.02, adaptive=True, preconditioning="spectral"),
          lambda o: o.contrib.muon(0.02, adaptive=True, preconditioning="spectral"), problem=KRONECKER),
    Entry("muon_aol_consistent_rms",
          lambda: steadax.contrib.muon(0.05, preconditioning="aol", consistent_rms=0.2, weight_decay=0.01),
          lambda o: o.contrib.muon(0.05, preconditioning="aol", consistent_rms=0.2, weight_decay=0.01),
          problem=KRONECKER),
    Entry("muon_schatten_dion",
          lambda: steadax.contrib.muon(0.05, ns_coeffs="dion", preconditioning="schatten", nesterov=False),
          lambda o: o.contrib.muon(0.05, ns_coeffs="dion", preconditioning="schatten", nesterov=False),
          problem=KRONECKER),
    Entry("muon_dimension_numbers",
          lambda: steadax.contrib.muon(0.05, muon_weight_dimension_numbers=_two_axis_dims,
                                       mu_dtype=jnp.float32),
          # Optax 0.2.8 fails on a callable that returns None for some leaves: give it the tree.
          lambda o: o.contrib.muon(0.05, mu_dtype=jnp.float32, muon_weight_dimension_numbers={
              "w": o.contrib.MuonDimensionNumbers(0, 1), "b": None}),
          problem=KRONECKER),
    Entry("galore", lambda: steadax.contrib.galore(0.1, rank=2, update_proj_gap=5),
          lambda o: o.contrib.galore(0.1, rank=2, update_proj_gap=5), problem=KRONECKER),
    Entry("galore_rank1_decay",
          lambda: steadax.contrib.galore(0.1, rank=1, update_proj_gap=1, scale=0.5, weight_decay=0.01),
          lambda o: o.contrib.galore(0.1, rank=1, update_proj_gap=1, scale=0.5, weight_decay=0.01),
          problem=KRONECKER),
    Entry("soap", lambda: steadax.soap(0.05, precondition_frequency=3), problem=KRONECKER),
    Entry("soap_low_precision_states",
          lambda: steadax.soap(0.05, precondition_frequency=2, mu_dtype=jnp.bfloat16,
                               statistics_dtype=jnp.bfloat16, eigenbasis_dtype=jnp.bfloat16,
                               precondition_1d=True),
          problem=KRONECKER),
    Entry("soap_max_precond_dim", lambda: steadax.soap(0.05, precondition_frequency=1, max_precond_dim=3),
          problem=KRONECKER),
    Entry("shampoo", lambda: steadax.shampoo(0.05, precondition_frequency=2), problem=KRONECKER),
    Entry("shampoo_blocked_sgd_graft",
          lambda: steadax.shampoo(0.05, block_size=2, precondition_frequency=1, graft_type="sgd"),
          problem=KRONECKER),
    Entry("shampoo_summed_no_graft",
          lambda: steadax.shampoo(0.1, shampoo_beta=1.0, graft_type="none", exponent_override=2,
                                  precondition_frequency=1, statistics_dtype=jnp.float32),
          problem=KRONECKER),
    Entry("soap_stacked", lambda: steadax.soap(0.05, precondition_frequency=3, weight_dimension_numbers=_stacked_dims),
          problem=STACKED),
    Entry("shampoo_stacked", lambda: steadax.shampoo(0.05, block_size=2, precondition_frequency=2,
                                                     weight_dimension_numbers=_stacked_dims), problem=STACKED),
    Entry("psgd_kron_stacked", lambda: steadax.psgd_kron(0.1, weight_dimension_numbers=_stacked_dims),
          problem=STACKED),
    Entry("muon_stacked", lambda: steadax.contrib.muon(0.05, muon_weight_dimension_numbers=_stacked_dims),
          # Optax's muon takes batch axes too; the tree, as _stacked_dims gives it for this problem.
          lambda o: o.contrib.muon(0.05, muon_weight_dimension_numbers={
              "w": o.contrib.MuonDimensionNumbers(1, 2), "b": None}),
          problem=STACKED),
    Entry("galore_stacked", lambda: steadax.contrib.galore(0.1, rank=2, update_proj_gap=5,
                                                           weight_dimension_numbers=_stacked_dims),
          problem=STACKED),
]
