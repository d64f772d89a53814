"""A state given back in other containers (as Flax NNX writes it) is read in init's containers.

NNX rebuilds every tuple, list and dict below a parameter's position as an ``nnx.State`` mapping
(integer keys for sequences). ``_Mapping`` below is such a container without Flax: a registered
pytree mapping whose children are flattened in key order, as ``nnx.State``'s are.
"""

from __future__ import annotations

import collections.abc

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax
from steadax._core import _containers


@jax.tree_util.register_pytree_with_keys_class
class _Mapping(collections.abc.Mapping):
  """A foreign mapping container (``nnx.State``-like: a Mapping, not a dict)."""

  def __init__(self, items):
    self._items = dict(items)

  def __getitem__(self, key):
    return self._items[key]

  def __iter__(self):
    return iter(self._items)

  def __len__(self):
    return len(self._items)

  def tree_flatten_with_keys(self):
    keys = sorted(self)
    return [(jax.tree_util.DictKey(k), self[k]) for k in keys], tuple(keys)

  @classmethod
  def tree_unflatten(cls, keys, children):
    return cls(zip(keys, children))


def _rebuilt_as_nnx_does(tree, params_def):
  """``tree`` with every container below a parameter's position turned into a ``_Mapping``."""
  def convert(node):
    if isinstance(node, tuple) and not hasattr(node, "_fields") or isinstance(node, list):
      return _Mapping({i: convert(x) for i, x in enumerate(node)})
    if isinstance(node, tuple):  # a NamedTuple (a quantised moment): its field names as keys
      return _Mapping({f: convert(getattr(node, f)) for f in node._fields})
    if isinstance(node, dict):
      return _Mapping({k: convert(v) for k, v in node.items()})
    return node

  def walk(state):
    if isinstance(state, tuple) and hasattr(state, "_fields"):
      return type(state)(*(walk(x) for x in state))
    if isinstance(state, tuple):
      return tuple(walk(x) for x in state)
    try:
      per_param = params_def.flatten_up_to(state)
    except (ValueError, TypeError):
      return state
    return params_def.unflatten([convert(x) for x in per_param])

  return walk(tree)


PARAMS = {"w": jnp.linspace(-1.0, 1.0, 80 * 64, dtype=jnp.float32).reshape(80, 64),
          "b": jnp.linspace(0.5, -0.5, 64, dtype=jnp.float32)}

# Each keeps per-parameter state that is itself a container: per-axis matrices (soap, shampoo,
# psgd_kron), per-axis covers (sm3), a quantised moment's codes and scales (adam8bit).
OPTIMIZERS = {
    "soap": lambda: steadax.soap(1e-2, precondition_frequency=1),
    "shampoo": lambda: steadax.shampoo(1e-2, precondition_frequency=1),
    "psgd_kron": lambda: steadax.psgd_kron(1e-2),
    "sm3": lambda: steadax.sm3(0.1),
    "adam8bit": lambda: steadax.adam8bit(1e-2, min_8bit_size=1024),
}


@pytest.mark.x32_only
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_update_reads_foreign_containers_and_gives_them_back(name):
  tx = OPTIMIZERS[name]()
  grads = jax.tree_util.tree_map(lambda p: jnp.cos(3.0 * p), PARAMS)
  state = tx.init(PARAMS)
  params_def = jax.tree_util.tree_structure(PARAMS)
  foreign = _rebuilt_as_nnx_does(state, params_def)
  assert jax.tree_util.tree_structure(foreign) != jax.tree_util.tree_structure(state)

  @jax.jit
  def two_steps(state):
    u1, state = tx.update(grads, state, PARAMS)
    u2, state = tx.update(grads, state, PARAMS)
    return u1, u2, state

  u1, u2, new_state = two_steps(state)
  f1, f2, new_foreign = two_steps(foreign)
  # The caller's containers come back, with the values of the state in init's containers.
  assert jax.tree_util.tree_structure(new_foreign) == jax.tree_util.tree_structure(foreign)
  for a, b in zip(jax.tree_util.tree_leaves((u1, u2, new_state)),
                  jax.tree_util.tree_leaves((f1, f2, new_foreign))):
    if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
      a, b = jax.random.key_data(a), jax.random.key_data(b)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.x32_only
def test_a_state_in_steadax_containers_is_not_rederived():
  _containers._INIT_STRUCTURE.clear()
  tx = steadax.soap(1e-2)
  state = tx.init(PARAMS)
  jax.eval_shape(lambda s: tx.update(PARAMS, s, PARAMS), state)
  assert not _containers._INIT_STRUCTURE  # no abstract init for tuples, dicts and NamedTuples


@pytest.mark.x32_only
def test_foreign_containers_with_other_leaves_still_get_the_diagnosis():
  tx = steadax.sm3(0.1)
  state = _rebuilt_as_nnx_does(tx.init(PARAMS), jax.tree_util.tree_structure(PARAMS))
  other = {"w": jnp.ones((80, 63)), "b": jnp.ones(64)}
  with pytest.raises(steadax.InputMismatchError, match="call init with these parameters"):
    tx.update(other, state, other)
