"""pytest integration: one test per transformation, each checked against the contract."""

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

# Only this module of steadax.testing needs pytest; the lazy surface loads it when
# `parametrize_transformations` is first read.
import pytest

__all__ = ["parametrize_transformations"]


class _Factory:
  """A zero-argument factory, called when its test runs."""

  def __init__(self, factory: Callable[[], Any]):
    self.factory = factory

  def __repr__(self) -> str:
    return f"<factory {getattr(self.factory, '__qualname__', self.factory)}>"


def _is_factory(case: Any) -> bool:
  return callable(case) and not (hasattr(case, "init") and hasattr(case, "update"))


def parametrize_transformations(cases: Mapping[str, Any] | Iterable[tuple[str, Any]],
                                argname: str = "tx") -> Callable[[Callable], Callable]:
  """Parametrize a pytest test over named transformations: one test (and test id) per name.

  Each case is a transformation or a zero-argument factory of one. A factory is called when its
  test runs, so a transformation that fails to build fails its own test, not the collection; the
  test's parameter is always the built transformation.

  Args:
    cases: ``{name: transformation or factory}`` or ``[(name, transformation or factory), ...]``.
    argname: the name of the test function's parameter.

  Returns:
    A decorator for the test function (``pytest.mark.parametrize`` underneath).

  Raises:
    ValueError: two cases have the same name.

  Example:
    >>> import steadax
    >>> from steadax.testing import parametrize_transformations
    >>> @parametrize_transformations({"sgd": lambda: steadax.sgd(0.1), "lion": steadax.lion(1e-4)})
    ... def test_contract(tx):
    ...   pass
    >>> [p.id for p in test_contract.pytestmark[0].args[1]]
    ['sgd', 'lion']
  """
  items = list(cases.items()) if isinstance(cases, Mapping) else list(cases)
  names = [name for name, _ in items]
  duplicates = sorted({n for n in names if names.count(n) > 1})
  if duplicates:
    raise ValueError(f"parametrize_transformations: duplicate names {duplicates}.")
  params = [pytest.param(_Factory(case) if _is_factory(case) else case, id=str(name))
            for name, case in items]

  def decorate(test: Callable) -> Callable:
    @functools.wraps(test)
    def built(*args, **kwargs):
      value = kwargs.get(argname)
      if isinstance(value, _Factory):
        kwargs[argname] = value.factory()
      return test(*args, **kwargs)

    return pytest.mark.parametrize(argname, params)(built)

  return decorate
