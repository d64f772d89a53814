"""MARS, PSGD-Kron and the low-memory Adam options: convergence on a noisy, ill-conditioned problem
and the measured state memory per parameter (the numbers of docs/optimizers.md)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax


def _spd(rng, n, condition):
  q, _ = np.linalg.qr(rng.normal(size=(n, n)))
  return (q * np.geomspace(1, condition, n)) @ q.T


_RNG = np.random.default_rng(0)
# f(W, b) = 1/2 <W - T, L (W - T) R> + 1/2 |b - 1|^2: a Kronecker-structured Hessian L (x) R with
# condition number 300, plus a vector leaf.
_L = jnp.asarray(_spd(_RNG, 4, 30.0), jnp.float32)
_R = jnp.asarray(_spd(_RNG, 3, 10.0), jnp.float32)
_T = jnp.asarray(_RNG.normal(size=(4, 3)), jnp.float32)
_P0 = {"w": jnp.zeros((4, 3), jnp.float32), "b": jnp.zeros(3, jnp.float32)}


def _loss(p):
  d = p["w"] - _T
  return 0.5 * jnp.sum(d * (_L @ d @ _R)) + 0.5 * jnp.sum((p["b"] - 1.0) ** 2)


@functools.partial(jax.jit, static_argnums=(1,))
def _final_loss(tx, steps):
  def body(carry, key):
    p, s = carry
    g = jax.grad(_loss)(p)
    g = jax.tree.map(lambda x: x + 0.1 * jax.random.normal(key, x.shape, x.dtype), g)  # gradient noise
    u, s = tx.update(g, s, p)
    return (steadax.apply_updates(p, u), s), None

  (p, _), _ = jax.lax.scan(body, (_P0, tx.init(_P0)), jax.random.split(jax.random.key(0), steps))
  return _loss(p)


_STEPS = 300
_DECAY = steadax.linear_schedule(0.05, 0.0, _STEPS)


@pytest.mark.parametrize("name, tx", [
    ("mars", steadax.mars(_DECAY)),
    ("psgd_kron", steadax.psgd_kron(_DECAY)),
    ("adam_lowmem", steadax.adam_lowmem(_DECAY)),
    ("adam8bit_quantized", steadax.adam8bit(_DECAY, min_8bit_size=1, block_size=4)),
], ids=lambda x: x if isinstance(x, str) else "")
def test_converges_on_a_noisy_ill_conditioned_quadratic(name, tx):
  initial = float(_loss(_P0))
  final = float(_final_loss(tx, _STEPS))
  assert np.isfinite(final) and final < 1e-4 * initial, f"{name}: {initial} -> {final}"


def _state_bytes(state) -> int:
  total = 0
  for leaf in jax.tree.leaves(state):
    if jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key):
      leaf = jax.random.key_data(leaf)
    total += leaf.nbytes
  return total


_N = 1024 * 1024
_COUNT = 4  # one int32 step counter
_MEMORY = [
    # name, optimizer, expected total state bytes for one float32 (1024, 1024) parameter
    ("adam", lambda: steadax.adam(1e-3), 8 * _N + _COUNT),
    ("adam mu_dtype=bfloat16", lambda: steadax.adam(1e-3, mu_dtype=jnp.bfloat16), 6 * _N + _COUNT),
    ("adam_lowmem", lambda: steadax.adam_lowmem(1e-3), 4 * _N + _COUNT),
    ("adam8bit", lambda: steadax.adam8bit(1e-3), 2 * _N + 2 * 4 * (_N // 256) + _COUNT),
    ("mars", lambda: steadax.mars(1e-3), 12 * _N + _COUNT),
    # momentum, two dense 1024x1024 factors, the count and the key's two uint32 words
    ("psgd_kron", lambda: steadax.psgd_kron(1e-3), 4 * _N + 2 * 4 * 1024 * 1024 + _COUNT + 8),
]


@pytest.mark.parametrize("name, factory, expected", _MEMORY, ids=[m[0] for m in _MEMORY])
def test_state_memory_per_parameter(name, factory, expected):
  params = {"w": jnp.zeros((1024, 1024), jnp.float32)}
  state = factory().init(params)
  measured = _state_bytes(state)
  assert measured == expected, f"{name}: {measured} bytes, {measured / _N:.4f} per parameter"
  abstract = jax.eval_shape(factory().init, params)
  assert sum(np.prod(a.shape) * a.dtype.itemsize for a in jax.tree.leaves(abstract)
             if not jnp.issubdtype(a.dtype, jax.dtypes.prng_key)) <= measured

