"""Optax's deprecated names, served the way Optax 0.2.8 serves them: a module ``__getattr__``.

Optax keeps old names reachable through a table in the module (``optax.tree_utils.tree_l2_norm``,
top-level ``optax.dpsgd`` ...): reading one returns the current function and emits a
``DeprecationWarning`` naming the replacement; an entry whose target is gone raises
``AttributeError`` with the deprecation message instead (``optax.monte_carlo``). steadax mirrors
every such table of Optax 0.2.8 (``tests/test_optax_names.py`` walks Optax's and checks each name),
and drops each entry when the Optax release it mirrors drops it. The names stay out of ``dir()`` and
``__all__``, as in Optax.
"""

import warnings
from collections.abc import Callable
from typing import Any

__all__ = ["deprecation_getattr", "warn_deprecated_call"]


def deprecation_getattr(module: str, table: dict[str, tuple[str, Callable[[], Any] | None]],
                        stacklevel: int = 2) -> Callable[[str], Any]:
  """A module ``__getattr__`` serving the deprecated names of ``table``.

  Args:
    module: the module's ``__name__`` (for the error of an unknown name).
    table: ``name -> (message, target)``; ``target()`` returns the object the name now stands for
      (a thunk, so the table may name objects of packages imported later), or is None when the name
      is removed: reading it raises ``AttributeError(message)``.

  Returns:
    The ``__getattr__`` function to assign in the module.

  Example:
    >>> import warnings
    >>> getattr_ = deprecation_getattr("pkg", {"old": ("pkg.old is deprecated: use pkg.new.", lambda: 42)})
    >>> with warnings.catch_warnings(record=True) as caught:
    ...   warnings.simplefilter("always")
    ...   value = getattr_("old")
    >>> value, caught[0].category.__name__, str(caught[0].message)
    (42, 'DeprecationWarning', 'pkg.old is deprecated: use pkg.new.')
  """

  def __getattr__(name: str) -> Any:
    if name in table:
      message, target = table[name]
      if target is None:
        raise AttributeError(message)
      warnings.warn(message, DeprecationWarning, stacklevel=stacklevel)
      return target()
    raise AttributeError(f"module {module!r} has no attribute {name!r}")

  return __getattr__


def warn_deprecated_call(message: str, *, at_caller: bool = False) -> None:
  """Emit ``DeprecationWarning(message)`` from a deprecated function, where Optax 0.2.8 emits it.

  Optax warns in two ways, and what a user sees depends on which: Python's default filters show a
  ``DeprecationWarning`` only when it is attributed to ``__main__``.

  * From inside the library (``global_norm``, ``optimistic_adam``, ``inject_stateful_hyperparams``:
    ``warnings.warn`` with the default stack level): attributed to an Optax module, so hidden under
    the default filters and shown by pytest or ``-W default``. The default here: attributed to the
    steadax function that called this one.
  * At the caller (Optax's ``warn_deprecated_function`` decorator: ``second_order.hvp``,
    ``hessian_diag``, ``fisher_diag``): ``at_caller=True`` attributes it to the line that called
    the deprecated function (one stack level further, as the decorator's ``stacklevel=2`` from its
    wrapper does), so a script's call shows it, as Optax's does.

  Args:
    message: the warning's text (Optax's, with ``optax`` read as ``steadax``).
    at_caller: attribute the warning to the user's line (Optax's decorator) instead of to steadax.

  Returns:
    None.

  Example:
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...   warnings.simplefilter("always")
    ...   warn_deprecated_call("old is deprecated: use new.")
    >>> caught[0].category.__name__
    'DeprecationWarning'
  """
  # Level 2 is the deprecated steadax function that called this one, 3 the line that called it.
  warnings.warn(message, DeprecationWarning, stacklevel=3 if at_caller else 2)
