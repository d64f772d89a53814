"""Registry entries: LAMB and LARS (trust-ratio optimizers)."""

import jax

import steadax

from .registry import Entry


def _matrices_only(params):
  return jax.tree_util.tree_map(lambda x: x.ndim >= 2, params)


ENTRIES = [
    Entry("lamb", lambda: steadax.lamb(0.05, weight_decay=0.01), lambda o: o.lamb(0.05, weight_decay=0.01)),
    Entry("lars", lambda: steadax.lars(0.1, trust_coefficient=0.1), lambda o: o.lars(0.1, trust_coefficient=0.1)),
    Entry("lars_nesterov_masks",
          lambda: steadax.lars(0.1, weight_decay=0.01, weight_decay_mask=_matrices_only, trust_coefficient=0.1,
                               trust_ratio_mask=_matrices_only, eps=1e-6, nesterov=True),
          lambda o: o.lars(0.1, weight_decay=0.01, weight_decay_mask=_matrices_only, trust_coefficient=0.1,
                           trust_ratio_mask=_matrices_only, eps=1e-6, nesterov=True)),
]
