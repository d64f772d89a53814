"""Strict test configuration: contract strict mode, strict dtype promotion, x64 from the env, and
XLA's cheapest CPU code generation (tests/compile_flags.py says why and what keeps the defaults)."""

import os

from tests.compile_flags import with_flags

# Before JAX starts its backend (XLA reads the variable once); child processes inherit it.
os.environ["XLA_FLAGS"] = with_flags(os.environ.get("XLA_FLAGS", ""))

import jax  # noqa: E402
import pytest  # noqa: E402

import steadax  # noqa: E402

X64 = os.environ.get("JAX_ENABLE_X64", "0").lower() in ("1", "true")
jax.config.update("jax_enable_x64", X64)
jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")
steadax.set_strict(True)


def pytest_configure(config):
  config.addinivalue_line("markers", "x32_only: run only with jax_enable_x64 off")
  config.addinivalue_line("markers", "slow: a longer test (still part of make test; run first)")


def pytest_collection_modifyitems(config, items):
  # The slow tests first (otherwise in collection order): under pytest-xdist a long test collected
  # late keeps one worker busy after the other has run out of tests.
  items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(autouse=True)
def _strict_everywhere():
  with steadax.strict_mode(True):
    yield
