"""Optimising complex parameters as pairs of real ones.

``split_real_and_imaginary(inner)`` hands ``inner`` every complex leaf ``z`` as the pair
``(Re z, Im z)`` and reassembles its updates, so an optimizer written for real numbers treats the two
parts as independent coordinates (Adam's second moment of a complex leaf then has one entry per part
instead of one per modulus). Every steadax optimizer already accepts complex parameters directly;
this wrapper is for the per-part behaviour and for inner transformations that do not.
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._core._adapters import as_inner
from .._core._docs import shared_args
from .._core._interface import GradientTransformation
from .._core._transformation import Transformation
from .._core._module import child_field
from .._core._roles import INNER, state_roles
from .._core._types import OptState

__all__ = ["SplitRealAndImaginaryState", "split_real_and_imaginary"]


class SplitRealAndImaginaryArrays(NamedTuple):
  """A complex leaf as its two real parts (the node ``inner`` sees, Optax's private name)."""

  real: Any
  imaginary: Any


@state_roles(inner_state=INNER)
class SplitRealAndImaginaryState(NamedTuple):
  """State of ``split_real_and_imaginary``: the inner transformation's state.

  Attributes:
    inner_state: the state of the inner transformation.
  """

  inner_state: OptState


def _split(x: Any) -> Any:
  if x is not None and jnp.iscomplexobj(x):
    return SplitRealAndImaginaryArrays(jnp.real(x), jnp.imag(x))
  return x


def _is_pair(x: Any) -> bool:
  return isinstance(x, SplitRealAndImaginaryArrays)


def _merge(x: Any) -> Any:
  if _is_pair(x):
    return jax.lax.complex(x.real, x.imaginary)
  return x


def _split_tree(tree: Any) -> Any:
  return jax.tree_util.tree_map(_split, tree, is_leaf=lambda x: x is None)


class SplitRealAndImaginary(Transformation):
  name = "split_real_and_imaginary"
  State = SplitRealAndImaginaryState
  inner: Any = child_field()

  def init_fn(self, params):
    return SplitRealAndImaginaryState(inner_state=self.inner.init(_split_tree(params)))

  def update_fn(self, updates, state, params=None, **extra_args):
    split_params = None if params is None else _split_tree(params)
    out, inner_state = self.inner.update(_split_tree(updates), state.inner_state, split_params, **extra_args)
    out = jax.tree_util.tree_map(_merge, out, is_leaf=_is_pair)
    return out, SplitRealAndImaginaryState(inner_state=inner_state)


@shared_args
def split_real_and_imaginary(inner: GradientTransformation) -> Transformation:
  """Runs ``inner`` on the real and imaginary parts of complex leaves as separate real leaves.

  Real leaves pass through unchanged. Keyword extras of ``update`` are forwarded to ``inner``.

  Args:
    inner: any transformation.

  Returns:
    A transformation with ``SplitRealAndImaginaryState(inner_state)``; complex updates come back
    in their parameters' dtypes.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.contrib.split_real_and_imaginary(steadax.sign_sgd(1.0))
    >>> z = jnp.array([3.0 - 0.5j])
    >>> opt.update(z, opt.init(z), z)[0]  # the sign of each part
    Array([-1.+1.j], dtype=complex64)
  """
  return SplitRealAndImaginary(as_inner(inner, "split_real_and_imaginary", "inner"))
