"""lion: every coordinate moves by the learning rate; weight decay and its mask; validation."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import steadax


def test_each_coordinate_moves_by_the_learning_rate_plus_decay():
  opt = steadax.lion(0.01, weight_decay=0.5, mask={"w": True, "b": False})
  p = {"w": jnp.asarray([2.0, -1.0]), "b": jnp.asarray([3.0])}
  g = {"w": jnp.asarray([1e-3, 40.0]), "b": jnp.asarray([-0.2])}
  u, state = opt.update(g, opt.init(p), p)
  np.testing.assert_allclose(np.asarray(u["w"]), -0.01 * (np.sign([1e-3, 40.0]) + 0.5 * np.asarray([2.0, -1.0])),
                             rtol=1e-6)
  np.testing.assert_allclose(np.asarray(u["b"]), [0.01], rtol=1e-6)
  assert type(state[1]).__name__ == "MaskedState"


@pytest.mark.parametrize("call, message", [
    (lambda: steadax.lion(0.1, weight_decay=-1e-3), "lion: weight_decay"),
    (lambda: steadax.lion(0.1, b1=2.0), "lion: b1"),
    (lambda: steadax.lion(None), "lion: learning_rate"),
])
def test_bad_hyperparameters_raise(call, message):
  with pytest.raises(ValueError, match=message):
    call()
