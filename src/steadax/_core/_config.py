"""Global switches of steadax: the strict contract mode.

Strict mode is a JAX user context (``jax.make_user_context``): its value is part of the jit cache
key, so a step traced with strict mode off is traced again when it is turned on, and the checks
run. It decides, at trace time, whether dtype drift in a transformation's state or updates raises
(strict) or is cast back (the default, or ``STEADAX_STRICT=1`` in the environment).
"""

import contextlib
import os
from collections.abc import Iterator

import jax

__all__ = ["strict_mode", "is_strict", "set_strict"]

_DEFAULT = os.environ.get("STEADAX_STRICT", "0").strip().lower() in ("1", "true", "yes", "on")
_STRICT = jax.make_user_context(default_value=_DEFAULT)


def is_strict() -> bool:
  """Whether dtype drift in a transformation's state or updates raises (True) or is cast back.

  Returns:
    The strict flag in force (the innermost ``strict_mode`` context, else the global setting).

  Example:
    >>> import steadax
    >>> with steadax.strict_mode(False):
    ...   steadax.is_strict()
    False
  """
  return bool(_STRICT.value)


def set_strict(value: bool) -> None:
  """Turn strict mode on or off for the whole process (contexts opened later still override it).

  Args:
    value: True to raise on any dtype drift or weak-typed state leaf.

  Example:
    >>> import steadax
    >>> before = steadax.is_strict()
    >>> steadax.set_strict(True); steadax.set_strict(before)
  """
  _STRICT.set_global(bool(value))


@contextlib.contextmanager
def strict_mode(value: bool = True) -> Iterator[None]:
  """Context manager for strict mode (the test suite runs wholly inside it).

  The value is part of the jit cache key: a function traced outside the context is traced again
  inside it, so the checks are never skipped by a cached trace.

  Args:
    value: the strict flag inside the context.

  Example:
    >>> import steadax
    >>> with steadax.strict_mode():
    ...   assert steadax.is_strict()
  """
  with _STRICT(bool(value)):
    yield
