"""The factories' decorator: argument descriptions written once, and the factory's own name.

**Shared descriptions.** 
A factory's docstring names a shared argument with the marker ``<shared>``::

    @shared_args
    def adam(learning_rate, b1=0.9, ...):
      '''Adam ...

      Args:
        learning_rate: <shared>
        nesterov: use Nesterov momentum (NAdam).
      '''

and ``shared_args`` puts the one description from ``ARGS`` in its place when the module is imported
(``help()`` and doctests see the full text); the docs site's griffe extension applies the same
``fill_shared`` to the source it reads. An unknown name raises at import time.

**The factory's name in errors.** A field check fails inside the Module being built, which knows
only its own name: ``adam(1e-3, b1=1.0)`` builds ``scale_by_adam``, whose check would say
``scale_by_adam: b1 ...``. A factory decorated with ``shared_args`` says its own name while it
runs: the outermost decorated factory of a call is recorded in a context variable (with its
parameter names), and ``Module``'s checks name it (``adam: b1 must lie in [0.0, 1.0)``; ``sm3 >
scale_by_sm3: b1 ...`` where the factory's argument has another name than the field). No frame is
inspected: every public factory carries the decorator (tests/core/test_module_checks.py checks it).
"""

import contextvars
import functools
from collections.abc import Callable
from typing import TypeVar, cast

__all__ = ["ARGS", "called_factory", "fill_shared", "shared_args"]

ARGS = {
    "learning_rate": "a scalar or a schedule (a callable of the int32 step count).",
    "b1": "decay of the first moment, in [0, 1).",
    "b2": "decay of the second moment, in [0, 1).",
    "eps": "added to the denominator outside the square root.",
    "eps_root": "added inside the square root (useful when differentiating through the optimizer).",
    "mu_dtype": "dtype of the first moment (default: each parameter's dtype).",
    "nu_dtype": "dtype of the second moment (default: each parameter's real dtype).",
    "weight_decay": "decoupled weight decay (a scalar or a schedule), multiplied by the learning rate.",
    "mask": "where the weight decay applies: a tree of booleans with the parameters' structure, or a "
            "callable of the parameters returning one.",
    "nesterov": "use Nesterov momentum.",
    "weight_dimension_numbers": "which axes of a parameter form its matrix (``steadax.WeightDimensionNumbers``): "
                                "one for every parameter of rank >= 2, a prefix tree of them with None where "
                                "a parameter keeps the default treatment, or a callable of the parameters "
                                "returning one. Axes in neither field are batch axes: each slice is an "
                                "independent matrix with its own state, stored with the batch axes leading "
                                "(docs/families.md, \"Stacked layers\"). None: the default above.",
    # The Muon family (contrib.muon, contrib.normuon and their scale_by_* blocks).
    "ns_coeffs": "Newton-Schulz coefficients: ``(a, b, c)`` for every step, ``((a, b, c), ...)`` one triple per "
                 "step (at most ``ns_steps``; their number sets the steps), or a preset: ``\"standard\"`` "
                 "(Jordan's quintic), ``\"dion\"`` (Ahn et al. 2025, 5 steps), ``\"polar_express\"`` "
                 "(``contrib.polar_express_coefficients(ns_steps, 2e-3)``; its docstring says why ``2e-3``).",
    "ns_steps": "number of Newton-Schulz steps (a Python int).",
    "ns_algorithm": "how the iteration is computed: ``\"standard\"`` (on the matrix), ``\"gram\"`` (on its "
                    "smaller Gram matrix with restarts: fewer multiply-adds for matrices wider than about "
                    "1.5:1; docs/families.md, \"Gram Newton-Schulz\"), ``\"auto\"`` (per matrix shape, the one "
                    "with fewer multiply-adds).",
    "preconditioning": "the scaling before the iteration: ``\"frobenius\"`` (divide by the Frobenius norm), "
                       "``\"spectral\"`` (by the spectral norm, an SVD), ``\"aol\"`` (AOL row rescaling in the "
                       "first step), ``\"schatten\"`` (Schatten-4 norm in the first step).",
    "adaptive": "scale each orthogonalized update ``O`` by ``<M, O>``, the dual norm of the momentum ``M`` "
                "(Bernstein & Newhouse 2024).",
    "muon_weight_dimension_numbers": "None (2-D parameters get the matrix optimizer, the others AdamW), a prefix "
                                     "tree of ``MuonDimensionNumbers`` with None where AdamW applies, or a "
                                     "callable of the parameters returning one; axes in neither field are "
                                     "batch axes (each slice its own matrix).",
    "consistent_rms": "None (the shape factor ``sqrt(max(1, fan_out / fan_in))``), or the target update RMS "
                      "(e.g. 0.2) of the factor ``consistent_rms * sqrt(max(fan_in, fan_out))``, AdamW's update "
                      "RMS (Liu et al. 2025).",
    "execution": "how shape groups are scheduled (``steadax.MatrixExecution``; default: grouped, split in "
                 "chunks only where the backend gains from it).",
}

_MARKER = "<shared>"
F = TypeVar("F", bound=Callable)


def fill_shared(doc: str, owner: str) -> str:
  """``doc`` with each ``name: <shared>`` line's marker replaced by ``ARGS[name]``.

  The one substitution both readers of a docstring get: ``shared_args`` applies it when a module is
  imported (``help()``, doctests), the docs site's griffe extension (tools/griffe_steadax.py) when
  it reads the source.

  Args:
    doc: a docstring.
    owner: the name of the function the docstring belongs to, for the error messages.

  Returns:
    The docstring with every marker filled in.

  Example:
    >>> print(fill_shared("Args:\\n  b1: <shared>", "f"))
    Args:
      b1: decay of the first moment, in [0, 1).
  """
  lines = []
  for line in doc.splitlines():
    head, sep, tail = line.partition(": ")
    if sep and tail.strip() == _MARKER:
      name = head.strip()
      if name not in ARGS:
        raise KeyError(f"{owner}: no shared description for argument `{name}`.")
      line = f"{head}: {ARGS[name]}"
    lines.append(line)
  if _MARKER in "\n".join(lines):
    raise ValueError(f"{owner}: a `{_MARKER}` marker is not on an `name: <shared>` line.")
  return "\n".join(lines) + ("\n" if doc.endswith("\n") else "")


# The outermost decorated factory running in this thread or task, with its parameter names.
_CALLED: contextvars.ContextVar[tuple[str, frozenset[str]] | None] = contextvars.ContextVar(
    "steadax_factory_called", default=None)


def called_factory() -> tuple[str, frozenset[str]] | None:
  """The public factory the user called, and its parameter names, while it runs (else None).

  The outermost call of a function decorated with ``shared_args``: ``adam`` while ``adam`` builds
  ``scale_by_adam`` (whose own factory is decorated too).

  Returns:
    ``(name, parameter names)``, or None outside any decorated factory.

  Example:
    >>> @shared_args
    ... def outer(b1=0.9):
    ...   return called_factory()
    >>> outer()
    ('outer', frozenset({'b1'}))
  """
  return _CALLED.get()


def shared_args(fn: F) -> F:
  """The decorator of every public factory: shared argument descriptions, and its name in errors.

  Replaces each ``name: <shared>`` line of ``fn``'s docstring with ``ARGS[name]``, and returns a
  function that calls ``fn`` with its name recorded for the checks of the Modules it builds (see
  the module docstring); the function keeps ``fn``'s name, signature and docstring.

  Args:
    fn: a public factory (its docstring may use the marker).

  Returns:
    The factory, with its docstring filled in.

  Example:
    >>> @shared_args
    ... def f(b1):
    ...   '''Args:
    ...     b1: <shared>
    ...   '''
    >>> "decay of the first moment" in f.__doc__
    True
  """
  fn.__doc__ = fill_shared(fn.__doc__ or "", fn.__qualname__)
  code = fn.__code__
  called = (fn.__name__, frozenset(code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]))

  @functools.wraps(fn)
  def factory(*args, **kwargs):
    if _CALLED.get() is not None:  # inside another factory: the outermost one is the user's
      return fn(*args, **kwargs)
    token = _CALLED.set(called)
    try:
      return fn(*args, **kwargs)
    finally:
      _CALLED.reset(token)

  return cast(F, factory)
