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
  assert ms.replace(k=4).k == 4
  with pytest.raises(ValueError, match="MultiSteps: every_k_schedule must be at least 1, got 0"):
    ms.replace(k=0)
  with pytest.raises(ValueError, match="at least 1"):
    steadax.MultiSteps(steadax.sgd(1.0), 0)


def test_replace_runs_post_init_checks():
  muon = steadax.contrib.scale_by_muon()
  with pytest.raises(ValueError):
    muon.replace(ns_steps=0)
