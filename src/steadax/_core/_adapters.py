"""Adapters: anything that is an ``(init, update)`` pair as a transformation accepting extras.

``as_inner`` is the one check of every transformation handed to ``chain``, ``partition``, ``masked``
and every wrapper: a steadax transformation is taken as it is, an Optax one (or a pair of functions)
is wrapped, and anything else is a TypeError naming the wrapper and the argument.
"""

import functools
import inspect
from typing import Any

from ._diagnosis import short_repr
from ._docs import shared_args
from ._interface import (
    GradientTransformation,
    GradientTransformationExtraArgs,
    TransformInitFn,
    TransformUpdateFn,
    _FunctionTransformation,
)
from ._module import child_field

__all__ = ["as_inner", "with_extra_args_support"]


class _WithExtraArgs(GradientTransformationExtraArgs):
  inner: Any = child_field()

  def init(self, params):
    return self.inner.init(params)

  def update(self, updates, state, params=None, **extra_args):
    del extra_args
    return self.inner.update(updates, state, params)


@shared_args
def with_extra_args_support(tx: GradientTransformation | tuple[TransformInitFn, TransformUpdateFn]) -> GradientTransformationExtraArgs:
  """Wrap ``tx`` so its ``update`` accepts (and ignores) keyword extras.

  Args:
    tx: any transformation (an Optax ``(init, update)`` pair included).

  Returns:
    ``tx`` itself when it already accepts extras, else a wrapper.

  Raises:
    TypeError: when ``tx`` is not a transformation (see ``as_inner``).

  Example:
    >>> import steadax
    >>> steadax.with_extra_args_support(steadax.identity()) is not None
    True
  """
  return as_inner(tx, "with_extra_args_support", "tx")


def _factory_call_example(fn: Any) -> str:
  """``adam(learning_rate)``: how to call a factory, from its required parameters."""
  name = getattr(getattr(fn, "func", fn), "__name__", None) or type(fn).__name__
  try:
    signature = inspect.signature(fn)
  except (TypeError, ValueError):
    return f"{name}(...)"
  required = [
      p.name for p in signature.parameters.values()
      if p.default is inspect.Parameter.empty
      and p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
  ]
  return f"{name}({', '.join(required)})"


def as_inner(tx: Any, owner: str, argument: str) -> GradientTransformationExtraArgs:
  """``tx`` as a transformation that accepts keyword extras, or a TypeError naming the misuse.

  The one check of every transformation handed to ``chain``, ``partition``, ``masked`` and every
  wrapper: a factory passed without calling it (``chain(clip(1.0), adam)``), a schedule, a number or
  anything else that is not an ``(init, update)`` pair is reported at construction with the
  wrapper's name and the argument, instead of failing later inside ``init``.

  Args:
    tx: a steadax transformation, an Optax one (any object with callable ``init`` and ``update``)
      or an ``(init, update)`` pair of callables.
    owner: the wrapper's name, for the message.
    argument: the argument that received ``tx`` (``"inner"``, ``"transforms['adam']"``...).

  Returns:
    ``tx`` itself when it is a steadax transformation accepting extras, else a wrapper.

  Raises:
    TypeError: when ``tx`` is not a transformation.

  Example:
    >>> import steadax
    >>> as_inner(steadax.adam, "chain", "argument 1")
    Traceback (most recent call last):
    ...
    TypeError: chain: argument 1 is the function `adam`, not a transformation: it builds one; call it, e.g. `adam(learning_rate)`.
  """
  if isinstance(tx, GradientTransformationExtraArgs):
    return tx
  if isinstance(tx, GradientTransformation):
    return _WithExtraArgs(tx)
  init, update = getattr(tx, "init", None), getattr(tx, "update", None)
  # An Optax transformation (a NamedTuple of the pair); a class has unbound init/update: not one.
  if callable(init) and callable(update) and not isinstance(tx, type):
    return _WithExtraArgs(_FunctionTransformation(init, update))
  if isinstance(tx, (tuple, list)) and len(tx) == 2 and all(callable(f) for f in tx):
    return _WithExtraArgs(_FunctionTransformation(*tx))
  if isinstance(tx, type) or inspect.isroutine(tx) or isinstance(tx, functools.partial):
    kind = "class" if isinstance(tx, type) else "function"
    name = getattr(getattr(tx, "func", tx), "__name__", None) or type(tx).__name__
    raise TypeError(
        f"{owner}: {argument} is the {kind} `{name}`, not a transformation: it builds one; call it, "
        f"e.g. `{_factory_call_example(tx)}`."
    )
  raise TypeError(
      f"{owner}: {argument} must be a transformation (an object with `init` and `update`, such as "
      f"`steadax.adam(1e-3)`), got {type(tx).__name__} {short_repr(tx)}."
  )

