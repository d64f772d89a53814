"""Global switches of steadax: the strict contract mode."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

__all__ = ["strict_mode", "is_strict", "set_strict"]

_state = threading.local()
_DEFAULT = os.environ.get("STEADAX_STRICT", "0").strip().lower() in ("1", "true", "yes", "on")


def is_strict() -> bool:
  """Whether dtype drift in a transformation's state raises (True) or is cast back (False)."""
  return getattr(_state, "strict", _DEFAULT)


def set_strict(value: bool) -> None:
  """Turn strict mode on or off for this thread.

  Args:
    value: True to raise on any dtype drift or weak-typed state leaf.

  Example:
    >>> import steadax
    >>> steadax.set_strict(True); steadax.set_strict(False)
  """
  _state.strict = bool(value)


@contextlib.contextmanager
def strict_mode(value: bool = True) -> Iterator[None]:
  """Context manager for strict mode (the test suite runs wholly inside it).

  Strict mode matters at trace time: it decides what happens when a transformation's ``update``
  returns a state whose dtypes differ from the state it was given.

  Example:
    >>> import steadax
    >>> with steadax.strict_mode():
    ...   assert steadax.is_strict()
  """
  previous = is_strict()
  set_strict(value)
  try:
    yield
  finally:
    set_strict(previous)
