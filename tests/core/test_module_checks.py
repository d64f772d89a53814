"""A Module is checked after any ``__init__`` (generated or hand-written) and by ``replace``."""

from __future__ import annotations

import pytest

import steadax
from steadax._core._module import Module, hyper_field, static_field


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
