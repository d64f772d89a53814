"""A Module is checked after any ``__init__`` (generated or hand-written) and by ``replace``."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

import steadax
from steadax._core._module import Module, hyper_field, static_field
from steadax._core._transformation import Transformation


def _positive(owner, name, value):
  if value <= 0:
    raise ValueError(f"{owner}: {name} must be positive, got {value}.")


class _OwnInit(Module):
  """A Module whose constructor takes other arguments than its fields, as MultiSteps does."""

  rate: float = hyper_field(1.0, check=_positive)
  size: int = static_field(1, check=_positive)

  def __init__(self, spec: str):
    rate, size = spec.split("/")
    object.__setattr__(self, "rate", float(rate))
    object.__setattr__(self, "size", int(size))


def test_a_hand_written_init_is_checked():
  assert _OwnInit("0.5/2").size == 2
  with pytest.raises(ValueError, match="_OwnInit: rate must be positive, got -1.0"):
    _OwnInit("-1/2")
  with pytest.raises(ValueError, match="_OwnInit: size must be positive, got 0"):
    _OwnInit("1/0")


def test_replace_checks_static_and_hyper_fields_whatever_the_constructor():
  module = _OwnInit("0.5/2")
  assert module.replace(size=3).size == 3
  assert module.replace(size=3).rate == 0.5
  with pytest.raises(ValueError, match="size must be positive"):
    module.replace(size=0)
  with pytest.raises(TypeError, match="no field named sizes"):
    module.replace(sizes=1)


def test_multisteps_replace_is_checked():
  ms = steadax.MultiSteps(steadax.sgd(1.0), 2)
  assert ms.replace(period=4).period == 4
  with pytest.raises(ValueError, match="MultiSteps: every_k_schedule must be at least 1, got 0"):
    ms.replace(period=0)
  with pytest.raises(ValueError, match="at least 1"):
    steadax.MultiSteps(steadax.sgd(1.0), 0)


def test_replace_runs_post_init_checks():
  muon = steadax.contrib.scale_by_muon()
  with pytest.raises(ValueError):
    muon.replace(ns_steps=0)


@pytest.mark.parametrize("build, message", [
    # The class field's check is the only check: the factory, the block and `replace` agree, each
    # naming what the user called. At 1 Adam's bias correction 1 - b^t divides by zero.
    (lambda: steadax.adam(1e-3, b1=1.0), r"^adam: b1 must lie in \[0.0, 1.0\), got 1.0"),
    (lambda: steadax.scale_by_adam(b1=1.0), r"^scale_by_adam: b1 must lie in \[0.0, 1.0\)"),
    (lambda: steadax.scale_by_adam().replace(b2=1.0), r"^scale_by_adam: b2 must lie in \[0.0, 1.0\)"),
    (lambda: steadax.scale_by_amsgrad(b2=1.0), r"^scale_by_amsgrad: b2 must lie in \[0.0, 1.0\)"),
    (lambda: steadax.adamax(0.1, b1=1.0), r"^adamax: b1 must lie in \[0.0, 1.0\)"),
    (lambda: steadax.inject_hyperparams(steadax.nadamw)(learning_rate=0.1, b2=1.0).init({}),
     r"^nadamw: b2 must lie in \[0.0, 1.0\)"),
    # The alias's argument is not the field's name: the path to the field.
    (lambda: steadax.sm3(0.1, momentum=1.0), r"^sm3 > scale_by_sm3: b1 must lie"),
    (lambda: steadax.adam(float("nan")), r"^adam: learning_rate must be finite"),
])
def test_one_check_names_the_factory_called(build, message):
  with pytest.raises(ValueError, match=message):
    build()



def test_adamax_leaves_its_uncorrected_b2_open():
  assert steadax.scale_by_adamax(b2=1.0).b2 == 1.0  # Adamax does not bias-correct its b2
  assert steadax.adamax(0.1, b2=1.0) is not None


def _same_default(a, b) -> bool:
  if a is b or (type(a) is type(b) and a == b):
    return True
  numbers = (int, float)
  return isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool) and float(a) == float(b)


def test_a_factorys_defaults_are_its_class_fields_defaults():
  """A factory's signature repeats its class fields' defaults (``help()``, IDEs and Optax's
  introspecting code read the signature); the two copies must agree, or ``scale_by_adam()`` and
  ``ScaleByAdam()`` would be different optimizers. Every public factory that returns one
  Transformation built from its arguments is compared, parameter by parameter."""
  checked, different = 0, []
  for namespace in (steadax, steadax.contrib, steadax.transforms):
    for name in namespace.__all__:
      factory = getattr(namespace, name)
      if not inspect.isfunction(factory):
        continue
      parameters = inspect.signature(factory).parameters.values()
      required = [p.name for p in parameters if p.default is inspect.Parameter.empty
                  and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
      if set(required) - {"learning_rate"}:
        continue
      try:
        built = factory(**{n: 1e-3 for n in required})
      except Exception:  # a factory that needs more than a learning rate (or warns): not compared
        continue
      if not isinstance(built, Transformation):
        continue
      fields = {f.name: f.default for f in dataclasses.fields(built)}
      for p in parameters:
        if p.default is inspect.Parameter.empty or fields.get(p.name, dataclasses.MISSING) is dataclasses.MISSING:
          continue
        checked += 1
        if not _same_default(p.default, fields[p.name]):
          different.append(f"{name}({p.name}={p.default!r}) builds a field whose default is {fields[p.name]!r}")
  assert checked > 300, checked
  assert not different, "\n".join(different)
