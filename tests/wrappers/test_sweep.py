"""steadax.sweep: n configurations stacked into one transformation, run under jax.vmap.

Each case builds a sweep and the n transformations it stands for; the vmapped run of the sweep
must give, slice by slice, the sequential runs' parameters and states (structure, dtypes and
values), in both x64 modes.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax as optax
from steadax import Transformation, hyper_field

X64 = jax.config.jax_enable_x64
STEPS = 4


def _params():
  params = {"w": jnp.array([1.0, -1.5, 2.0, 0.5], jnp.float32), "b": jnp.array([0.8, -0.6], jnp.float32)}
  if X64:  # a float64 leaf beside the float32 ones: the sweep keeps each leaf's dtype
    params["d"] = jnp.array([0.3, -0.2, 0.1], jnp.float64)
  return params


def _loss(params):
  total = 0.0
  for i, leaf in enumerate(jax.tree_util.tree_leaves(params)):
    total = total + 0.5 * (i + 1.0) * jnp.sum((leaf - 0.1).astype(jnp.float32) ** 2)
  return total


def _stacked(tree, n):
  return jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (n, *jnp.shape(x))), tree)


def _step(tx, params, state):
  grads = jax.grad(_loss)(params)
  updates, state = tx.update(grads, state, params, value=_loss(params))
  return optax.apply_updates(params, updates), state


@jax.jit
def _run_one(tx, params):
  state = tx.init(params)
  states = [state]
  for _ in range(STEPS):
    params, state = _step(tx, params, state)
    states.append(state)
  return params, states


@jax.jit
def _run_sweep(opt, params):
  # in_axes=0 for the sweep, the (stacked) params and the state.
  state = jax.vmap(lambda tx, p: tx.init(p))(opt, params)
  states = [state]
  for _ in range(STEPS):
    params, state = jax.vmap(_step)(opt, params, state)
    states.append(state)
  return params, states


LRS = [1e-3, 3e-2, 1e-1]
PEAKS = jnp.array([0.05, 0.1, 0.2])

CASES = {
    "adamw-lr-wd": (
        lambda: optax.sweep(optax.adamw, learning_rate=jnp.array(LRS), weight_decay=[1e-4, 1e-2, 0.0]),
        lambda: [optax.adamw(lr, weight_decay=wd) for lr, wd in zip(LRS, [1e-4, 1e-2, 0.0])]),
    "schedule-peak": (
        lambda: optax.sweep(
            lambda peak: optax.adamw(optax.warmup_cosine_decay_schedule(0.0, peak, 2, 10)), peak=PEAKS),
        lambda: [optax.adamw(optax.warmup_cosine_decay_schedule(0.0, p, 2, 10)) for p in [0.05, 0.1, 0.2]]),
    "inject-hyperparams": (
        lambda: optax.sweep(optax.inject_hyperparams(optax.sgd), learning_rate=LRS, momentum=0.9),
        lambda: [optax.inject_hyperparams(optax.sgd)(learning_rate=lr, momentum=0.9) for lr in LRS]),
    "inject-schedule": (
        lambda: optax.sweep(
            lambda end: optax.inject_hyperparams(optax.adam)(optax.linear_schedule(0.1, end, 3)),
            end=[0.0, 0.01, 0.05]),
        lambda: [optax.inject_hyperparams(optax.adam)(optax.linear_schedule(0.1, e, 3))
                 for e in [0.0, 0.01, 0.05]]),
    "chain-positional": (
        lambda: optax.sweep(
            lambda clip, lr: optax.chain(optax.clip_by_global_norm(clip), optax.adam(lr)),
            [0.5, 1.0, 2.0], np.array(LRS)),
        lambda: [optax.chain(optax.clip_by_global_norm(c), optax.adam(lr))
                 for c, lr in zip([0.5, 1.0, 2.0], LRS)]),
    "multisteps": (
        lambda: optax.sweep(lambda lr: optax.MultiSteps(optax.adam(lr), every_k_schedule=2), lr=LRS),
        lambda: [optax.MultiSteps(optax.adam(lr), every_k_schedule=2) for lr in LRS]),
    "list-of-transformations": (
        lambda: optax.sweep([optax.lion(lr, b1=b1) for lr, b1 in zip(LRS, [0.9, 0.8, 0.95])]),
        lambda: [optax.lion(lr, b1=b1) for lr, b1 in zip(LRS, [0.9, 0.8, 0.95])]),
    "reduce-on-plateau-value": (
        lambda: optax.sweep(lambda lr: optax.chain(optax.sgd(lr), optax.contrib.reduce_on_plateau(
            patience=1, factor=0.5)), lr=LRS),
        lambda: [optax.chain(optax.sgd(lr), optax.contrib.reduce_on_plateau(patience=1, factor=0.5))
                 for lr in LRS]),
}


def _describe(tree):
  return jax.tree_util.tree_map(lambda x: (jnp.shape(x), jnp.asarray(x).dtype), tree)


@pytest.mark.parametrize("case", list(CASES))
def test_each_slice_of_the_sweep_is_the_sequential_run(case):
  make_sweep, make_list = CASES[case]
  opt, txs = make_sweep(), make_list()
  n = len(txs)
  params = _params()
  swept_params, swept_states = _run_sweep(opt, _stacked(params, n))
  for i, tx in enumerate(txs):
    one_params, one_states = _run_one(tx, params)
    for swept_state, one_state in zip(swept_states, one_states):
      # The stacked state is the single state plus a leading axis n: structure, dtypes, no weak types.
      assert jax.tree_util.tree_structure(swept_state) == jax.tree_util.tree_structure(one_state)
      for s, o in zip(jax.tree_util.tree_leaves(swept_state), jax.tree_util.tree_leaves(one_state)):
        assert s.shape == (n, *o.shape) and s.dtype == o.dtype and not s.weak_type
        np.testing.assert_allclose(s[i], o, rtol=2e-6, atol=1e-7)
    assert _describe(jax.tree_util.tree_map(lambda x: x[i], swept_params)) == _describe(one_params)
    jax.tree_util.tree_map(
        lambda s, o: np.testing.assert_allclose(s[i], o, rtol=2e-6, atol=1e-7), swept_params, one_params)


def test_every_leaf_is_stacked_as_jax_stacks_the_values():
  opt = optax.sweep(optax.adamw, learning_rate=[1e-3, 1e-2], weight_decay=1e-4)
  single = optax.adamw(1e-3, weight_decay=1e-4)
  assert jax.tree_util.tree_structure(opt) == jax.tree_util.tree_structure(single)
  float_dtype = jnp.float64 if X64 else jnp.float32
  for leaf in jax.tree_util.tree_leaves(opt):
    # Python numbers stay weakly typed, as when the transformation is a jit argument.
    assert leaf.shape == (2,) and leaf.dtype == float_dtype and leaf.weak_type
  np.testing.assert_allclose(opt.transforms[2].learning_rate, [1e-3, 1e-2], rtol=1e-6)
  np.testing.assert_allclose(opt.transforms[1].weight_decay, [1e-4, 1e-4], rtol=1e-6)
  # An array keeps its dtype (and strong type).
  opt = optax.sweep(optax.sgd, learning_rate=jnp.array([0.1, 0.2], jnp.bfloat16))
  assert opt.transforms[-1].learning_rate.dtype == jnp.bfloat16
  assert not opt.transforms[-1].learning_rate.weak_type


def test_tuples_and_scalars_are_passed_unchanged():
  seen = []

  def factory(lr, betas, *, mask=None):
    seen.append((lr, betas, mask))
    return optax.adam(lr, *betas)

  opt = optax.sweep(factory, [0.1, 0.2], (0.9, 0.99), mask=None)
  assert [s[1] for s in seen] == [(0.9, 0.99)] * 2 and [s[0] for s in seen] == [0.1, 0.2]
  np.testing.assert_allclose(opt.transforms[0].b2, [0.99, 0.99], rtol=1e-6)


def test_a_new_sweep_does_not_recompile():
  step = jax.jit(jax.vmap(_step))
  params = _stacked(_params(), 2)
  for lrs in ([1e-3, 1e-2], [0.5, 0.25]):
    opt = optax.sweep(optax.adamw, learning_rate=lrs)
    step(opt, params, jax.vmap(lambda tx, p: tx.init(p))(opt, params))
  assert step._cache_size() == 1


def test_init_from_one_shared_copy_of_the_params():
  opt = optax.sweep(optax.adam, learning_rate=[1e-3, 1e-2, 1e-1])
  params = _params()
  state = jax.vmap(lambda tx: tx.init(params))(opt)
  single = optax.adam(1e-3).init(params)
  assert jax.tree_util.tree_structure(state) == jax.tree_util.tree_structure(single)
  for s, o in zip(jax.tree_util.tree_leaves(state), jax.tree_util.tree_leaves(single)):
    assert s.shape == (3, *o.shape) and s.dtype == o.dtype


# Errors: each names the sweep, the tree path and what differs.

def test_a_static_field_cannot_be_swept():
  with pytest.raises(ValueError, match=r"sweep\(adam\): configuration 1 .*nesterov=False.* at "
                     r"\.transforms\[0\]\.nesterov \(static field ScaleByAdam\.nesterov: True vs False\)"
                     r".*swept argument responsible: nesterov"):
    optax.sweep(optax.adam, learning_rate=[1e-3, 1e-2], nesterov=[True, False])
  with pytest.raises(ValueError, match=r"ScaleByAdam\.mu_dtype.*responsible: mu_dtype"):
    optax.sweep(optax.adam, learning_rate=[1e-3, 1e-2], mu_dtype=[jnp.float32, jnp.bfloat16])


def test_none_against_a_number_is_a_structure_difference():
  with pytest.raises(ValueError, match=r"sweep\(sgd\).* at \.transforms\[0\] .*responsible: momentum"):
    optax.sweep(optax.sgd, learning_rate=[0.1, 0.2], momentum=[None, 0.9])


def test_different_schedules_cannot_be_stacked():
  with pytest.raises(ValueError, match=r"transformation 1 differs from transformation 0 .* at "
                     r"\.transforms\[1\]\.learning_rate \(CosineDecay vs PolynomialSchedule\)"):
    optax.sweep([optax.adam(optax.cosine_decay_schedule(1.0, 10)),
                 optax.adam(optax.linear_schedule(1.0, 0.0, 10))])
  with pytest.raises(ValueError, match=r"learning_rate\.fn \(static field Fn\.fn.*functions compare by "
                     r"identity"):
    optax.sweep([optax.adam(lambda count: 0.1), optax.adam(lambda count: 0.2)])
  # A static number of a schedule (its step counts) is static too.
  with pytest.raises(ValueError, match=r"transition_steps"):
    optax.sweep(lambda steps: optax.sgd(optax.linear_schedule(0.1, 0.0, steps)), steps=[10, 20])


def test_sizes_must_agree():
  with pytest.raises(ValueError, match=r"sweep\(adam\): swept arguments have different sizes "
                     r"\(learning_rate has 2, b1 has 3\)"):
    optax.sweep(optax.adam, learning_rate=[1e-3, 1e-2], b1=jnp.array([0.9, 0.8, 0.7]))


def test_nothing_to_sweep_or_an_empty_sweep():
  with pytest.raises(ValueError, match=r"sweep\(adamw\): nothing to sweep"):
    optax.sweep(optax.adamw, learning_rate=1e-3, weight_decay=1e-4)
  with pytest.raises(ValueError, match=r"sweep\(adamw\): the swept arguments are empty"):
    optax.sweep(optax.adamw, learning_rate=[])
  with pytest.raises(ValueError, match=r"sweep: nothing to stack"):
    optax.sweep([])
  with pytest.raises(TypeError, match=r"takes no other arguments"):
    optax.sweep([optax.sgd(0.1)], learning_rate=[0.1])


def test_only_steadax_transformations():
  with pytest.raises(TypeError, match=r"sweep: item 1 is a tuple, not a steadax transformation"):
    optax.sweep([optax.sgd(0.1), (lambda p: (), lambda u, s, p=None: (u, s))])
  with pytest.raises(TypeError, match=r"sweep\(<lambda>\): configuration 0 is a float"):
    optax.sweep(lambda lr: lr, lr=[0.1, 0.2])


class _Toy(Transformation):
  """A transformation with one leaf of any value (to reach the stacking checks)."""

  name = "toy"
  factor: Any = hyper_field(1.0)

  def update_fn(self, updates, state, params=None, **extra_args):
    return updates, state


def test_leaves_must_stack():
  with pytest.raises(ValueError, match=r"sweep: the leaf at \.factor has different shapes .*\(2,\), \(3,\)"):
    optax.sweep([_Toy(jnp.ones(2)), _Toy(jnp.ones(3))])
  with pytest.raises(TypeError, match=r"sweep\(_Toy\): the leaf at \.factor is a str"):
    optax.sweep(_Toy, factor=["a", "b"])
  with pytest.raises(TypeError, match=r"sweep: the leaf at \.factor has dtypes that do not promote"):
    # Shape (1,): a 0-d int32 leaf is built as the Python int it stands for (one kind of leaf).
    optax.sweep([_Toy(jnp.ones((1,), jnp.int32)), _Toy(jnp.ones((1,), jnp.bfloat16))])


def test_partial_binds_a_list_argument():
  # A list is swept; a list that is a value (a mask for list-shaped params) is bound with partial.
  mask = [True, False]
  with pytest.raises(ValueError, match=r"sweep\(adamw\): .*responsible: mask"):
    optax.sweep(optax.adamw, learning_rate=[1e-3, 1e-2], weight_decay=0.1, mask=mask)
  with pytest.raises(ValueError, match=r"sweep\(adamw\): .*responsible: b1"):  # a partial's name
    optax.sweep(functools.partial(optax.adamw, mask=mask), learning_rate=[1e-3, 1e-2],
                b1=[0.9, None])
  opt = optax.sweep(functools.partial(optax.adamw, mask=mask), learning_rate=[1e-3, 1e-2],
                    weight_decay=0.1)
  params = [jnp.ones(2, jnp.float32), jnp.ones(2, jnp.float32)]
  state = jax.vmap(lambda tx: tx.init(params))(opt)
  grads = _stacked([jnp.zeros(2, jnp.float32)] * 2, 2)
  updates, _ = jax.vmap(lambda tx, g, s, p: tx.update(g, s, p))(opt, grads, state, _stacked(params, 2))
  assert float(jnp.abs(updates[1]).max()) == 0.0 and float(jnp.abs(updates[0]).min()) > 0.0
