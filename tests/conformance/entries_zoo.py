"""Registry entries: Optax's remaining main-namespace optimizers (the "zoo") and their blocks."""

import jax
import jax.numpy as jnp
import numpy as np

import steadax

from .registry import Entry, Problem, value_extra_args

_TARGET = np.array([[0.3, -0.2, 0.1], [0.0, 0.4, -0.3]], np.float32)
_SCALES = np.array([[1.0, 2.0, 0.5], [1.5, 1.0, 3.0]], np.float32)


def _matrix_loss(params):
  m = params["m"].astype(jnp.float32)
  v = params["v"].astype(jnp.float32)
  return 0.5 * jnp.sum(jnp.asarray(_SCALES) * (m - jnp.asarray(_TARGET)) ** 2) + 0.5 * jnp.sum((v - 0.2) ** 2)


# A matrix leaf, so SM3's row/column covers and centralize's row means are exercised against Optax.
MATRIX = Problem(
    "matrix_quadratic", _matrix_loss,
    lambda: {"m": jnp.array([[1.0, -1.0, 0.5], [-0.5, 1.5, 1.0]], jnp.float32),
             "v": jnp.array([1.0, -0.5, 0.8], jnp.float32)})

# Optax's float32 rho_t for RAdam is off by up to ~0.03 (see the radam note); under x64 it is exact.
_RADAM_TOL = dict(optax_rtol=1e-4, optax_atol=2e-5) if jax.config.jax_enable_x64 else dict(
    optax_rtol=5e-3, optax_atol=1e-3)

ENTRIES = [
    # Adam's relatives.
    Entry("adabelief", lambda: steadax.adabelief(0.1), lambda o: o.adabelief(0.1)),
    Entry("adabelief_nesterov", lambda: steadax.adabelief(0.1, nesterov=True),
          lambda o: o.adabelief(0.1, nesterov=True)),
    Entry("adan", lambda: steadax.adan(0.1), lambda o: o.adan(0.1)),
    Entry("adan_weight_decay", lambda: steadax.adan(0.1, weight_decay=0.01),
          lambda o: o.adan(0.1, weight_decay=0.01)),
    Entry("radam", lambda: steadax.radam(0.1), lambda o: o.radam(0.1), **_RADAM_TOL,
          notes="x32: Optax forms rho_t = rho_inf - 2t b2^t / (1 - b2^t) directly in float32 (off by "
                "~0.03 at t=6); steadax uses expm1 (tests/optimizers/test_zoo_deviations.py). The "
                "tolerance is the default under x64, where Optax computes it in float64."),
    Entry("radam_nesterov", lambda: steadax.radam(0.1, nesterov=True), lambda o: o.radam(0.1, nesterov=True),
          **_RADAM_TOL),
    Entry("yogi", lambda: steadax.yogi(0.1), lambda o: o.yogi(0.1)),
    # Other adaptive methods.
    Entry("adadelta", lambda: steadax.adadelta(1.0, eps=1e-2), lambda o: o.adadelta(1.0, eps=1e-2)),
    Entry("adadelta_no_learning_rate", lambda: steadax.adadelta(eps=1e-2, weight_decay=0.01),
          lambda o: o.adadelta(1.0, eps=1e-2, weight_decay=0.01),
          notes="learning_rate=None descends with unit step; Optax 0.2.8 ascends (its equivalent is 1.0)"),
    Entry("novograd", lambda: steadax.novograd(0.1), lambda o: o.novograd(0.1)),
    Entry("novograd_weight_decay", lambda: steadax.novograd(0.1, weight_decay=0.01),
          lambda o: o.novograd(0.1, weight_decay=0.01)),
    Entry("sm3", lambda: steadax.sm3(0.2), lambda o: o.sm3(0.2), problem=MATRIX),
    # Sign-based.
    Entry("sign_sgd", lambda: steadax.sign_sgd(0.05), lambda o: o.sign_sgd(0.05)),
    Entry("signum", lambda: steadax.signum(0.05), lambda o: o.signum(0.05)),
    Entry("rprop", lambda: steadax.rprop(0.05), lambda o: o.rprop(0.05), optax_agrees=False, complex_ok=False,
          notes="complex: Rprop compares signs of successive gradients, which complex numbers lack. "
                "Optax 0.2.8 returns the previous step's update (optax PR 1725; test_optax_bits.py); "
                "tests/optimizers/test_zoo_deviations.py checks both against the corrected sequence."),
    # Min-max methods.
    Entry("optimistic_gradient_descent", lambda: steadax.optimistic_gradient_descent(0.1),
          lambda o: o.optimistic_gradient_descent(0.1)),
    Entry("optimistic_adam", lambda: steadax.optimistic_adam(0.05), lambda o: o.optimistic_adam(0.05)),
    Entry("optimistic_adam_v2", lambda: steadax.optimistic_adam_v2(0.05), lambda o: o.optimistic_adam_v2(0.05)),
    # Step sizes from the problem.
    Entry("polyak_sgd", lambda: steadax.polyak_sgd(), lambda o: o.polyak_sgd(), extra_args=value_extra_args),
    Entry("polyak_sgd_plus", lambda: steadax.polyak_sgd(max_learning_rate=0.5, f_min=0.1, variant="sps+"),
          lambda o: o.polyak_sgd(max_learning_rate=0.5, f_min=0.1, variant="sps+"), extra_args=value_extra_args),
    Entry("distance_over_gradients",
          lambda: steadax.chain(steadax.scale_by_distance_over_gradients(reps_rel=1e-2), steadax.sgd(1.0)),
          lambda o: o.chain(o.scale_by_distance_over_gradients(reps_rel=1e-2), o.sgd(1.0))),
    Entry("noisy_sgd", lambda: steadax.noisy_sgd(0.1, key=0), lambda o: o.noisy_sgd(0.1, key=0),
          notes="the same key gives Optax's noise exactly for float32 leaves"),
    # Per-layer relative steps.
    Entry("fromage", lambda: steadax.fromage(0.1), lambda o: o.fromage(0.1)),
    Entry("centralize_sgd", lambda: steadax.chain(steadax.centralize(), steadax.sgd(0.2)),
          lambda o: o.chain(o.centralize(), o.sgd(0.2)), problem=MATRIX, progress=0.8,
          notes="centralised steps cannot move a row's mean: only the centred part of the loss falls"),
]
