"""Stacked layers (issue 33 §1): with dimension numbers naming the layer axis a batch axis, every
matrix optimizer treats a ``(L, d_in, d_out)`` weight as L independent matrices.

A stacked model's updates and state equal its unstacked twin's (the same layers given as a list of
``(d_in, d_out)`` weights in their place), its state is stacked like it (batch axes leading in the
matrix statistics, moments parameter-shaped), and no statistic spans a batch axis. One jitted
program per layout runs the five optimizers for three steps.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax
from steadax import WeightDimensionNumbers as Dims

X64 = bool(jax.config.jax_enable_x64)
DTYPE = jnp.float64 if X64 else jnp.float32
LAYERS = 3

# Matrices: batch axis 0. The norm vector: a batch of vectors for SOAP, Shampoo and PSGD-Kron
# (their treatment of each layer's vector), None for Muon (AdamW) and GaLore (not projected).
KRON = {"q": Dims(1, 2), "up": Dims(1, 2), "norm": Dims((), 1)}
MATRICES = {"q": Dims(1, 2), "up": Dims(1, 2), "norm": None}
OPTIMIZERS = {
    "soap": lambda dims: steadax.soap(0.02, precondition_frequency=1, weight_dimension_numbers=KRON if dims else None),
    "shampoo": lambda dims: steadax.shampoo(0.02, block_size=3, precondition_frequency=1,
                                            weight_dimension_numbers=KRON if dims else None),
    # Preconditioner updates at every step; the probes are drawn per matrix in a layout-independent
    # order (scale_by_psgd_kron), so the stacked run and its twin draw the same numbers.
    "psgd_kron": lambda dims: steadax.psgd_kron(0.02, preconditioner_update_probability=1.0,
                                                weight_dimension_numbers=KRON if dims else None),
    "muon": lambda dims: steadax.contrib.muon(0.02, adaptive=True, muon_weight_dimension_numbers=MATRICES if dims else None),
    "galore": lambda dims: steadax.contrib.galore(0.02, rank=2, update_proj_gap=1,
                                                  weight_dimension_numbers=MATRICES if dims else None),
}


def _stacked():
  rng = np.random.default_rng(0)
  shapes = {"q": (LAYERS, 4, 4), "up": (LAYERS, 4, 6), "norm": (LAYERS, 4)}
  return {name: jnp.asarray(rng.normal(size=shape), DTYPE) for name, shape in shapes.items()}


def _as_list(tree):
  return {name: [x[i] for i in range(LAYERS)] for name, x in tree.items()}


def _restack(tree):
  """The unstacked twin's tree with each list of layers stacked (lists only hold layers). The
  ``(0, 0)`` placeholder of an axis that is not preconditioned stays one placeholder."""
  if isinstance(tree, list):
    return jax.tree_util.tree_map(lambda *xs: xs[0] if xs[0].shape == (0, 0) else jnp.stack(xs), *tree)
  if isinstance(tree, dict):
    return {k: _restack(v) for k, v in tree.items()}
  if isinstance(tree, tuple) and not hasattr(tree, "_fields"):
    return tuple(_restack(v) for v in tree)
  if isinstance(tree, tuple):
    return type(tree)(*(_restack(v) for v in tree))
  return tree


def _three_steps(stacked: bool, params):
  rng = np.random.default_rng(1)
  grads = [jax.tree_util.tree_map(lambda p: jnp.asarray(rng.normal(size=p.shape), p.dtype), _stacked())
           for _ in range(3)]
  grads = grads if stacked else [_as_list(g) for g in grads]
  out = {}
  for name, make in OPTIMIZERS.items():
    tx = make(stacked)
    state = tx.init(params)
    for g in grads:
      updates, state = tx.update(g, state, params)
    out[name] = (updates, state)
  return out


@pytest.fixture(scope="module")
def both_layouts():
  params = _stacked()
  return (jax.jit(lambda p: _three_steps(True, p))(params),
          jax.jit(lambda p: _three_steps(False, p))(_as_list(params)))


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_stacked_layers_equal_their_unstacked_twin(both_layouts, name):
  stacked, listed = both_layouts[0][name], _restack(both_layouts[1][name])
  assert jax.tree_util.tree_structure(stacked) == jax.tree_util.tree_structure(listed), name
  tol = 1e-10 if X64 else 2e-6
  for (path, a), b in zip(jax.tree_util.tree_flatten_with_path(stacked)[0], jax.tree_util.tree_leaves(listed)):
    where = f"{name} {jax.tree_util.keystr(path)}"
    if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
      continue
    assert a.dtype == b.dtype and a.shape == b.shape, where
    scale = max(1.0, float(np.max(np.abs(np.asarray(b, np.float64))))) if b.size else 1.0
    # Eigenvectors amplify last-bit differences of the statistics by the inverse eigenvalue gap.
    loose = 50 if ".eigenbases" in where else 1
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=0,
                               atol=loose * tol * scale, err_msg=where)


def _shapes(tx, params):
  return jax.tree_util.tree_map(lambda x: x.shape, jax.eval_shape(tx.init, params))


def test_the_state_of_a_stacked_weight_is_stacked_like_it():
  """Batch axes lead in every matrix statistic (wherever they are in the weight), moments are
  parameter-shaped, and without dimension numbers each optimizer keeps its tensor treatment."""
  w = jax.ShapeDtypeStruct((5, 4, 6), jnp.float32)  # (d_in, layers, d_out): batch axis 1
  dims = Dims(0, 2)
  soap = _shapes(steadax.scale_by_soap(weight_dimension_numbers=dims), w)
  assert soap.mu == soap.nu == (5, 4, 6)
  assert soap.statistics == soap.eigenbases == ((4, 5, 5), (4, 6, 6))
  assert _shapes(steadax.scale_by_soap(), w).statistics == ((5, 5), (4, 4), (6, 6))  # the default
  shampoo = _shapes(steadax.scale_by_shampoo(block_size=3, weight_dimension_numbers=dims), w)
  assert shampoo.statistics == shampoo.preconditioners == ((4, 4, 3, 3), (4, 4, 3, 3))
  assert _shapes(steadax.scale_by_psgd_kron(weight_dimension_numbers=dims), w).preconditioner == ((4, 5, 5),
                                                                                                (4, 6, 6))
  galore = _shapes(steadax.contrib.scale_by_galore(rank=2, weight_dimension_numbers=dims), w)
  assert galore.projector == (4, 6, 2) and galore.base_optimizer_state.mu == (4, 5, 2)
  assert _shapes(steadax.contrib.scale_by_muon(weight_dimension_numbers=dims), w).mu == (5, 4, 6)
  # A stacked vector, ``Dims((), 1)``: one vector per layer (SOAP's plain Adam, PSGD's diagonals).
  v = jax.ShapeDtypeStruct((4, 7), jnp.float32)
  assert _shapes(steadax.scale_by_soap(weight_dimension_numbers=Dims((), 1)), v).statistics == ((0, 0),)
  assert _shapes(steadax.scale_by_psgd_kron(weight_dimension_numbers=Dims((), 1)), v).preconditioner == ((4, 7),)


def test_dimension_numbers_that_do_not_fit_name_the_parameter():
  tx = steadax.soap(0.1, weight_dimension_numbers={"w": Dims(1, 3), "b": None})
  params = {"w": jnp.zeros((2, 3, 4)), "b": jnp.zeros(3)}
  with pytest.raises(ValueError, match=r"scale_by_soap: axis 3 .* parameter at \['w'\]"):
    tx.init(params)
