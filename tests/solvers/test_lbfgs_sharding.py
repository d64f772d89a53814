"""lbfgs's curvature memory is created with the parameters' shardings (8 virtual CPU devices)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from tests.compile_flags import device_env

_EIGHT_DEVICES = textwrap.dedent("""
    import jax, jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import steadax
    assert len(jax.devices()) == 8
    mesh = Mesh(jax.devices(), ("x",))
    params = {"w": jax.device_put(jnp.ones((16, 3)), NamedSharding(mesh, P("x"))),
              "v": jax.device_put(jnp.ones((4, 8)), NamedSharding(mesh, P(None, "x"))),
              "b": jax.device_put(jnp.ones(3), NamedSharding(mesh, P()))}
    tx = steadax.lbfgs(memory_size=4)
    state = tx.init(params)
    memory = state[0].diff_params_memory
    expected = {"w": P(None, "x"), "v": P(None, None, "x"), "b": P(None)}
    for name, spec in expected.items():
      for field in ("diff_params_memory", "diff_updates_memory"):
        leaf = getattr(state[0], field)[name]
        assert leaf.shape == (4, *params[name].shape)
        assert leaf.sharding.is_equivalent_to(NamedSharding(mesh, spec), leaf.ndim), (name, leaf.sharding)
    # Each device holds its own shard's pairs: 2 of the 16 rows of w, 1 of the 8 columns of v.
    assert memory["w"].addressable_shards[0].data.shape == (4, 2, 3)
    assert memory["v"].addressable_shards[0].data.shape == (4, 4, 1)

    # The memory keeps its sharding through jitted updates (scale_by_lbfgs alone: the line search
    # does not touch the memory and would only add compilation).
    direction = steadax.scale_by_lbfgs(memory_size=4)
    step = jax.jit(lambda g, s, p: direction.update(g, s, p)[1])
    s = direction.init(params)
    for _ in range(2):
      s = step(params, s, params)
    leaf = s.diff_params_memory["w"]
    assert leaf.sharding.is_equivalent_to(NamedSharding(mesh, P(None, "x")), 3), leaf.sharding
    print("OK")
""")


@pytest.mark.x32_only  # a subprocess on an 8-device host mesh; sharding does not depend on x64
def test_lbfgs_memory_takes_the_parameters_shardings():
  env = device_env(8)
  result = subprocess.run([sys.executable, "-c", _EIGHT_DEVICES], env=env, capture_output=True,
                          text=True, timeout=300)
  assert result.returncode == 0 and "OK" in result.stdout, result.stderr[-3000:]
