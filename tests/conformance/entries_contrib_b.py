"""Registry entries: Optax's remaining contrib optimizers (ACProp, AdEMAMix, ADOPT, MADGRAD, Sophia,
SAM, reduce_on_plateau, normalize, split_real_and_imaginary).

Not here, because the Entry format feeds parameter-shaped gradients: ``differentially_private_aggregate``
and ``dpsgd`` take *per-example* gradients (a batch axis in front of every leaf) and return
parameter-shaped updates. tests/contrib/test_contrib_b.py runs them through the same harness (scan,
cond, while_loop, jit with new hyperparameters, mixed and complex trees) with per-example gradients,
and compares them with Optax for the same key.

Sophia's Hessian estimator and SAM's opaque mode take their special inputs (``obj_fn``, ``grad_fn``)
through ``extra_args``; Sophia with the same key draws Optax's random signs, so it is compared with
Optax like the deterministic entries.
"""

import jax
import jax.numpy as jnp

import steadax

from .registry import Entry, Problem, QUADRATIC, value_extra_args


def _obj_fn(loss_fn, params, grads):
  return {"obj_fn": loss_fn}


def _grad_fn(loss_fn, params, grads):
  # conj: jax.grad of a real function of complex leaves is the conjugate of the ascent direction.
  return {"grad_fn": lambda p, i: jax.tree_util.tree_map(jnp.conj, jax.grad(loss_fn, allow_int=True)(p))}


def _sam(o, **kwargs):
  return o.contrib.sam(o.sgd(0.1), o.chain(o.contrib.normalize(), o.sgd(0.05)), **kwargs)


def _sam_adam_three(o):
  return o.contrib.sam(o.adam(0.05), o.chain(o.contrib.normalize(), o.adam(0.01)), sync_period=3, reset_state=False)


def _shifted_loss(params):
  return QUADRATIC.loss(params) + 1.0


# reduce_on_plateau compares the loss with its best value; a constant offset makes the relative
# threshold matter (rtol |best| with best > 0, where steadax and Optax agree).
SHIFTED = Problem("quadratic_plus_one", _shifted_loss, QUADRATIC.init)

ENTRIES = [
    Entry("acprop", lambda: steadax.contrib.acprop(0.1, eps=1e-2), lambda o: o.contrib.acprop(0.1, eps=1e-2),
          notes="at the minimum the raw-gradient step g / sqrt(s) amplifies rounding: with the default eps "
                "Optax under x64 (float64 bias corrections) ends 1.5e-3 away from its own x32 result"),
    Entry("acprop_schedule_weight_decay",
          lambda: steadax.contrib.acprop(steadax.linear_schedule(0.1, 0.05, 50), b1=0.8, weight_decay=0.01,
                                         mask=lambda p: jax.tree_util.tree_map(lambda x: x.size > 2, p)),
          lambda o: o.contrib.acprop(o.linear_schedule(0.1, 0.05, 50), b1=0.8, weight_decay=0.01,
                                     mask=lambda p: jax.tree_util.tree_map(lambda x: x.size > 2, p))),
    Entry("scale_by_acprop",
          lambda: steadax.chain(steadax.contrib.scale_by_acprop(b2=0.99, eps_root=0.0), steadax.scale(-0.1)),
          lambda o: o.chain(o.contrib.scale_by_acprop(b2=0.99, eps_root=0.0), o.scale(-0.1)), notes="as acprop"),
    Entry("ademamix", lambda: steadax.contrib.ademamix(0.05, b3=0.99), lambda o: o.contrib.ademamix(0.05, b3=0.99)),
    Entry("ademamix_schedules_weight_decay",
          lambda: steadax.contrib.ademamix(0.05, b3=steadax.linear_schedule(0.9, 0.99, 20),
                                           alpha=steadax.linear_schedule(0.0, 1.0, 20), weight_decay=0.01),
          lambda o: o.contrib.ademamix(0.05, b3=o.linear_schedule(0.9, 0.99, 20),
                                       alpha=o.linear_schedule(0.0, 1.0, 20), weight_decay=0.01)),
    Entry("scale_by_ademamix_mu_bf16",
          lambda: steadax.chain(steadax.contrib.scale_by_ademamix(b3=0.99, alpha=2.0, mu_dtype=jnp.bfloat16),
                                steadax.scale(-0.05)),
          lambda o: o.chain(o.contrib.scale_by_ademamix(b3=0.99, alpha=2.0, mu_dtype=jnp.bfloat16), o.scale(-0.05)),
          optax_agrees=False,
          notes="Optax returns its float32 moments without casting back to mu_dtype (test_optax_bits.py)"),
    Entry("simplified_ademamix", lambda: steadax.contrib.simplified_ademamix(0.01, b1=0.9, alpha=1.0),
          lambda o: o.contrib.simplified_ademamix(0.01, b1=0.9, alpha=1.0)),
    Entry("scale_by_simplified_ademamix_schedule",
          lambda: steadax.chain(steadax.contrib.scale_by_simplified_ademamix(
              b1=0.9, alpha=steadax.linear_schedule(0.0, 2.0, 20), eps_root=1e-8), steadax.scale(-0.01)),
          lambda o: o.chain(o.contrib.scale_by_simplified_ademamix(
              b1=0.9, alpha=o.linear_schedule(0.0, 2.0, 20), eps_root=1e-8), o.scale(-0.01))),
    Entry("adopt", lambda: steadax.contrib.adopt(0.1), lambda o: o.contrib.adopt(0.1)),
    Entry("adopt_nesterov_no_clipping", lambda: steadax.contrib.adopt(0.05, b2=0.99, nesterov=True, use_clipping=False),
          lambda o: o.contrib.adopt(0.05, b2=0.99, nesterov=True, use_clipping=False)),
    Entry("scale_by_adopt_mu_bf16",
          lambda: steadax.chain(steadax.contrib.scale_by_adopt(mu_dtype=jnp.bfloat16), steadax.scale(-0.1)),
          lambda o: o.chain(o.contrib.scale_by_adopt(mu_dtype=jnp.bfloat16), o.scale(-0.1)), optax_agrees=False,
          notes="bfloat16 momentum (rounded per step, Optax's rounding differs: test_optax_bits.py)"),
    Entry("madgrad", lambda: steadax.contrib.madgrad(0.05), lambda o: o.contrib.madgrad(0.05)),
    Entry("madgrad_schedule_weight_decay",
          lambda: steadax.contrib.madgrad(steadax.linear_schedule(0.05, 0.02, 50), momentum=0.5, weight_decay=0.01),
          lambda o: o.contrib.madgrad(o.linear_schedule(0.05, 0.02, 50), momentum=0.5, weight_decay=0.01)),
    Entry("sophia", lambda: steadax.contrib.sophia(0.1), lambda o: o.contrib.sophia(0.1), extra_args=_obj_fn,
          notes="Hutchinson's random signs come from the same key (0) as Optax's, split the same way"),
    Entry("sophia_interval_no_clip",
          lambda: steadax.contrib.sophia(0.5, eps=1.0, gamma=1.0, clip_threshold=None, update_interval=3,
                                         weight_decay=0.0,
                                         hessian_diagonal_fn=steadax.contrib.hutchinson_estimator_diag_hessian(
                                             jax.random.PRNGKey(3))),
          lambda o: o.contrib.sophia(0.5, eps=1.0, gamma=1.0, clip_threshold=None, update_interval=3, weight_decay=0.0,
                                     hessian_diagonal_fn=o.contrib.hutchinson_estimator_diag_hessian(
                                         jax.random.PRNGKey(3))),
          extra_args=_obj_fn, notes="eps=1 bounds the unclipped first step (the Hessian EMA starts at 0)"),
    Entry("sam", lambda: _sam(steadax), _sam, steps=60),
    Entry("sam_adam_sync3_keep_state", lambda: _sam_adam_three(steadax), _sam_adam_three, steps=60),
    Entry("sam_opaque", lambda: _sam(steadax, opaque_mode=True), lambda o: _sam(o, opaque_mode=True),
          extra_args=_grad_fn),
    Entry("reduce_on_plateau",
          lambda: steadax.chain(steadax.sgd(0.4), steadax.contrib.reduce_on_plateau(factor=0.5, patience=2)),
          lambda o: o.chain(o.sgd(0.4), o.contrib.reduce_on_plateau(factor=0.5, patience=2)),
          extra_args=value_extra_args, problem=SHIFTED, progress=0.3),
    Entry("reduce_on_plateau_accumulate_cooldown",
          lambda: steadax.chain(steadax.sgd(0.4), steadax.contrib.reduce_on_plateau(
              factor=0.5, patience=1, rtol=0.01, atol=1e-3, cooldown=2, accumulation_size=3, min_scale=0.1)),
          lambda o: o.chain(o.sgd(0.4), o.contrib.reduce_on_plateau(
              factor=0.5, patience=1, rtol=0.01, atol=1e-3, cooldown=2, accumulation_size=3, min_scale=0.1)),
          extra_args=value_extra_args, problem=SHIFTED, progress=0.3),
    Entry("normalize_sgd", lambda: steadax.chain(steadax.contrib.normalize(), steadax.scale(-0.1)),
          lambda o: o.chain(o.contrib.normalize(), o.scale(-0.1))),
    Entry("split_real_and_imaginary_adam", lambda: steadax.contrib.split_real_and_imaginary(steadax.adam(0.1)),
          lambda o: o.contrib.split_real_and_imaginary(o.adam(0.1))),
]
