"""Global switches of steadax: the strict contract mode.

Strict mode decides, at trace time, whether dtype drift in a transformation's state or updates
raises (strict) or is cast back (the default, or ``STEADAX_STRICT=1`` in the environment).

**Traces made in one mode never serve the other.** A jitted step traced with strict mode off has
no checks in it; when strict mode is turned on, the step must be traced again or the checks are
skipped. So the mode is a JAX user context (``jax.make_user_context``), whose value is part of the
key of every jit cache, the user's functions included. But a user context is part of that key from
the moment it is *registered*: registering one makes JAX trace and compile again every function
the process jitted before (the key of each cached trace changed). Registered on import, steadax
would recompile a user's programs the first time it is used, though nothing about them changed.

So nothing is registered until the mode is first set or entered (``set_strict``, ``strict_mode``,
the contract checker's ``collect_drift``). Until then every trace is made in the default mode, so
no cached trace can be in the wrong mode; importing steadax, building, initialising and updating
transformations registers nothing and invalidates no compiled function of the user's. The first
change registers the context: every function jitted before is traced again once (in the new mode:
exactly the retrace strict mode needs), and from then on JAX keys traces by the mode. One context
holds both switches (strict, collecting), so this happens at most once per process.
"""

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any, NamedTuple

import jax

__all__ = ["strict_mode", "is_strict", "set_strict"]


class _Mode(NamedTuple):
  """The switches traces depend on: strict mode, and the contract checker's drift collection."""

  strict: bool
  collecting: bool


_DEFAULT = _Mode(os.environ.get("STEADAX_STRICT", "0").strip().lower() in ("1", "true", "yes", "on"),
                 False)
_context: Any = None  # the JAX user context holding the mode, once registered (see the docstring)
_lock = threading.Lock()


def _registered() -> Any:
  """The mode's JAX user context, registered now if it was not (a one-time retrace of every jitted
  function, see the module docstring)."""
  global _context
  with _lock:
    if _context is None:
      _context = jax.make_user_context(default_value=_DEFAULT)
  return _context


def mode() -> _Mode:
  """The switches in force: the default until one was first set or entered."""
  return _DEFAULT if _context is None else _context.value


@contextlib.contextmanager
def entered(**changes: bool) -> Iterator[None]:
  """A context with some switches changed (``strict=``, ``collecting=``), keying traces by them."""
  context = _registered()
  with context(mode()._replace(**changes)):
    yield


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
  return mode().strict


def set_strict(value: bool) -> None:
  """Turn strict mode on or off for the whole process (contexts opened later still override it).

  The first time strict mode is set or entered in a process, functions jitted before are traced
  again once (their traces were made without strict mode's value in their key); see
  ``strict_mode``.

  Args:
    value: True to raise on any dtype drift or weak-typed state leaf.

  Example:
    >>> import steadax
    >>> before = steadax.is_strict()
    >>> steadax.set_strict(True); steadax.set_strict(before)
  """
  context = _registered()
  context.set_global(context.get_global()._replace(strict=bool(value)))


@contextlib.contextmanager
def strict_mode(value: bool = True) -> Iterator[None]:
  """Context manager for strict mode (the test suite runs wholly inside it).

  Strict mode's value is part of the jit cache key once it has been set or entered: a function
  traced outside the context is traced again inside it, so the checks are never skipped by a
  cached trace. Until then steadax keys nothing (importing it, building, initialising or updating a
  transformation never makes JAX recompile a function of yours); the first ``strict_mode`` or
  ``set_strict`` of a process makes every function jitted before it trace once more.

  Args:
    value: the strict flag inside the context.

  Example:
    >>> import steadax
    >>> with steadax.strict_mode():
    ...   assert steadax.is_strict()
  """
  with entered(strict=bool(value)):
    yield
