"""Registry entries: masked, partition, groups, flatten, fuse and the stateless AGC / non-negativity blocks.

lookahead's parameters are ``LookaheadParams``, not the registry's plain trees: it is tested in
tests/wrappers/test_lookahead.py instead.
"""

import jax

import steadax

from .registry import Entry


def _big(params):
  """Callable mask: leaves with at least 4 entries (``w`` of the quadratic, not ``b``)."""
  return jax.tree_util.tree_map(lambda x: x.size >= 4, params)


def _labels(params):
  return jax.tree_util.tree_map(lambda x: "adam" if x.size >= 4 else "sgd", params)


def _masked(o):
  return o.chain(o.masked(o.scale_by_adam(), _big), o.scale(-0.1))


def _partition(o):
  return o.partition({"adam": o.adam(0.1), "sgd": o.sgd(0.1)}, _labels)


# On the quadratic ``b`` matches the first group; on the matrix's tree ``nested.row`` does.
_GROUPS = {"b|nested.*": 0.0, "*": 0.01}

ENTRIES = [
    Entry("masked_adam_callable", lambda: _masked(steadax), _masked),
    Entry("partition_adam_sgd", lambda: _partition(steadax), _partition),
    Entry("flatten_adam", lambda: steadax.flatten(steadax.adam(0.1)), lambda o: o.flatten(o.adam(0.1))),
    # fuse changes where the state lives, not the maths: Optax's unfused optimizer is the reference.
    Entry("fuse_adamw", lambda: steadax.fuse(steadax.adamw(0.1, weight_decay=1e-2)),
          lambda o: o.adamw(0.1, weight_decay=1e-2)),
    Entry("fuse_clip_sgd_momentum",
          lambda: steadax.fuse(steadax.chain(steadax.clip_by_global_norm(1.0),
                                             steadax.sgd(0.05, momentum=0.9, nesterov=True))),
          lambda o: o.chain(o.clip_by_global_norm(1.0), o.sgd(0.05, momentum=0.9, nesterov=True))),
    Entry("groups_adamw",
          lambda: steadax.groups({k: steadax.adamw(0.1, weight_decay=wd) for k, wd in _GROUPS.items()}),
          lambda o: o.partition({"nd": o.adamw(0.1, weight_decay=0.0), "d": o.adamw(0.1, weight_decay=0.01)},
                                {"w": "d", "b": "nd"}),
          notes="the Optax equivalent is partition with the labels groups computes for the quadratic"),
    Entry("groups_multipliers",
          lambda: steadax.groups({"b|nested.*": {"lr_mult": 0.5, "wd_mult": 0.0}, "re:.*": {}},
                                 steadax.adamw(0.1, weight_decay=0.01)),
          lambda o: o.partition({"nd": o.adamw(0.05, weight_decay=0.0), "d": o.adamw(0.1, weight_decay=0.01)},
                                {"w": "d", "b": "nd"}),
          notes="lr_mult/wd_mult over a base; the Optax equivalent is partition with the labels groups "
                "computes for the quadratic"),
    Entry("adam_adaptive_grad_clip", lambda: steadax.chain(steadax.adaptive_grad_clip(0.1), steadax.adam(0.1)),
          lambda o: o.chain(o.adaptive_grad_clip(0.1), o.adam(0.1))),
    Entry("sgd_keep_params_nonnegative",
          lambda: steadax.chain(steadax.sgd(0.1), steadax.keep_params_nonnegative()),
          lambda o: o.chain(o.sgd(0.1), o.keep_params_nonnegative()), complex_ok=False,
          notes="non-negativity is an order constraint: real parameters only"),
]
