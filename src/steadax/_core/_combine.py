"""chain and named_chain."""

from ._adapters import as_inner
from ._contract import InputMismatchError
from ._docs import shared_args
from ._interface import GradientTransformation
from ._module import child_field, static_field
from ._transformation import Transformation

__all__ = ["chain", "named_chain", "Chain", "NamedChain"]


class Chain(Transformation):
  """Applies transformations in sequence; the state is the tuple of their states."""

  name = "chain"
  elementwise = "children"
  requires_float = False
  transforms: tuple = child_field()

  def init_fn(self, params):
    return tuple(t.init(params) for t in self.transforms)

  def update_fn(self, updates, state, params=None, **extra_args):
    if type(state) is not tuple or len(state) != len(self.transforms):
      held = (f"the state holds {len(state)} entries for {len(self.transforms)} transformations"
              if type(state) is tuple else
              f"update was given a {type(state).__name__} as the state, but this chain's init "
              f"makes a tuple of {len(self.transforms)} states (one per transformation)")
      raise InputMismatchError(
          f"chain: {held}: this state is not this chain's state. Pass the state init returned "
          "(were the state and the params swapped?)."
      )
    new_state = []
    for t, s in zip(self.transforms, state):
      updates, s = t.update(updates, s, params, **extra_args)
      new_state.append(s)
    return updates, tuple(new_state)


@shared_args
def chain(*args: GradientTransformation) -> Chain:
  """Applies a sequence of transformations one after the other.

  Args:
    *args: transformations (any ``(init, update)`` pair is accepted).

  Returns:
    A transformation whose state is the tuple of the inner states.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.chain(steadax.clip(1.0), steadax.scale(-0.1))
    >>> tx.update(jnp.array([3.0]), tx.init(jnp.zeros(1)))[0]
    Array([-0.1], dtype=float32)
  """
  return Chain(tuple(as_inner(t, "chain", f"argument {i + 1}") for i, t in enumerate(args)))


class NamedChain(Transformation):
  """Like ``Chain`` with a state dictionary keyed by name."""

  name = "named_chain"
  elementwise = "children"
  requires_float = False
  names: tuple = static_field(())
  transforms: tuple = child_field(())

  def __post_init__(self):
    if len(set(self.names)) != len(self.names):
      raise ValueError(f"named_chain: names must be unique, got {self.names}.")

  def init_fn(self, params):
    return {n: t.init(params) for n, t in zip(self.names, self.transforms)}

  def update_fn(self, updates, state, params=None, **extra_args):
    if not isinstance(state, dict) or set(state) != set(self.names):
      held = f"states named {sorted(state)}" if isinstance(state, dict) else f"a {type(state).__name__}"
      raise InputMismatchError(
          f"named_chain: update was given {held} as the state, but this chain's init makes a dict "
          f"of states named {list(self.names)}: this state is not this chain's state."
      )
    new_state = {}
    for n, t in zip(self.names, self.transforms):
      updates, new_state[n] = t.update(updates, state[n], params, **extra_args)
    return updates, new_state


@shared_args
def named_chain(*transforms: tuple[str, GradientTransformation]) -> NamedChain:
  """Chains transformations and keys their states by name.

  Args:
    *transforms: ``(name, transformation)`` pairs.

  Returns:
    A transformation whose state is ``{name: state}``.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.named_chain(("clip", steadax.clip(1.0)), ("sgd", steadax.scale(-1.0)))
    >>> sorted(tx.init(jnp.zeros(1)))
    ['clip', 'sgd']
  """
  for i, pair in enumerate(transforms):
    if not (isinstance(pair, tuple) and len(pair) == 2):
      raise TypeError(
          f"named_chain: argument {i + 1} must be a (name, transformation) pair, e.g. "
          f"('adam', steadax.adam(1e-3)), got {type(pair).__name__}.")
  names = tuple(n for n, _ in transforms)
  txs = tuple(as_inner(t, "named_chain", f"the transformation named {n!r}") for n, t in transforms)
  return NamedChain(names, txs)
