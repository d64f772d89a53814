"""Registry entries: the Muon family as the 2025 reports use it (issue 34 §1): NorMuon, Muon with
Polar Express coefficients (given, and the factory's preset), Muon on the Gram iteration, MuonClip
(Muon then QK-clip, its logits an extra argument).

They train the Kronecker-factored quadratic of the Muon entries (``entries_matrix.KRONECKER``).
QK-clip reads every 2-D parameter as a query with its heads on axis 1, and its ``max_logits``
(from ``extra_args``) are the squared column norms of each matrix: above ``tau = 1`` at the start
(so the clip acts in every run) and below it at the problem's optimum (so it lets the run converge).
"""

import jax
import jax.numpy as jnp

import steadax

from .entries_matrix import KRONECKER
from .registry import Entry

_PE5 = steadax.contrib.polar_express_coefficients(5)


def _queries(params):
  return jax.tree_util.tree_map(lambda x: steadax.contrib.QKClipSpec("query", 1) if x.ndim == 2 else None,
                                params)


def _max_logits(loss_fn, params, grads):
  return {"max_logits": jax.tree_util.tree_map(
      lambda x: jnp.sum(jnp.abs(x).astype(jnp.float32) ** 2, axis=0) if x.ndim == 2 else None, params)}


def _muon_clip():
  return steadax.chain(steadax.contrib.muon(0.05), steadax.contrib.qk_clip(_queries, tau=1.0))


ENTRIES = [
    Entry("normuon", lambda: steadax.contrib.normuon(0.05), problem=KRONECKER),
    Entry("normuon_plain_momentum_nu_f32_decay",
          lambda: steadax.contrib.normuon(0.05, beta2=0.9, nesterov=False, nu_dtype=jnp.float32,
                                          weight_decay=0.01, ns_coeffs=_PE5),
          problem=KRONECKER),
    Entry("muon_polar_express", lambda: steadax.contrib.muon(0.05, ns_coeffs=_PE5, eps=1e-7),
          lambda o: o.contrib.muon(0.05, ns_coeffs=_PE5, eps=1e-7), problem=KRONECKER,
          notes="no 50-step differential with Optax: the first polynomial's slope at 0 (8.1) lifts "
                "float32 rounding in the near-zero singular values of the momentum near the optimum "
                "to O(1) in the update, so both trajectories drift apart by 6e-3 while each step "
                "agrees to 6e-6 (tests/contrib/test_polar_express.py compares steps with Optax)"),
    Entry("muon_polar_express_preset", lambda: steadax.contrib.muon(0.05, ns_coeffs="polar_express", eps=1e-7),
          problem=KRONECKER),
    # The Gram iteration is the standard one in exact arithmetic: Optax's Muon is its reference.
    Entry("muon_gram", lambda: steadax.contrib.muon(0.05, ns_algorithm="gram"), lambda o: o.contrib.muon(0.05),
          problem=KRONECKER),
    Entry("normuon_gram_auto_polar_express",
          lambda: steadax.contrib.normuon(0.05, ns_coeffs="polar_express", ns_algorithm="auto"), problem=KRONECKER),
    Entry("muon_qk_clip", _muon_clip, extra_args=_max_logits, problem=KRONECKER,
          notes="QK-clip scales the parameters (p + u) * s: with low-precision parameters the "
                "update p (s - 1) + u s is rounded to their dtype like any update"),
]
