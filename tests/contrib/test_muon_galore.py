"""Muon and GaLore: their defining properties, dimension numbers, errors, sharding and convergence."""

from __future__ import annotations

import functools
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import steadax
from steadax.contrib import GaLoreDimensionNumbers, MuonDimensionNumbers
from tests.sharding.virtual_devices import run_for_result

X64 = bool(jax.config.jax_enable_x64)


def _normal(seed, shape, dtype=jnp.float32):
  return jnp.asarray(np.random.default_rng(seed).normal(size=shape), dtype)


def _one_muon_step(g, **kwargs):
  """The orthogonalized update of one step with no momentum (``beta=0``): the iteration on ``g``."""
  tx = steadax.contrib.scale_by_muon(beta=0.0, nesterov=False, **kwargs)
  return tx.update(g, tx.init(g))[0]


# --------------------------------------------------------------------------------------------------
# Muon


@pytest.mark.parametrize("shape", [(16, 8), (8, 16)])
@pytest.mark.parametrize("variant", [
    {}, {"preconditioning": "spectral"}, {"preconditioning": "aol"}, {"preconditioning": "schatten"},
    {"ns_coeffs": "dion"},
])
def test_muon_update_is_near_orthogonal(shape, variant):
  """Jordan et al. 2024: the Newton-Schulz quintic maps every singular value of the (normalised)
  momentum into roughly [0.7, 1.2], so the update is close to the polar factor ``U V^T``."""
  g = _normal(0, shape)
  u = np.asarray(_one_muon_step(g, **variant), np.float64)
  s = np.linalg.svd(u, compute_uv=False)
  assert s.min() > 0.5 and s.max() < 1.5, s
  uu, _, vt = np.linalg.svd(np.asarray(g, np.float64), full_matrices=False)
  polar = uu @ vt
  cosine = np.sum(u * polar) / (np.linalg.norm(u) * np.linalg.norm(polar))
  assert cosine > 0.97, cosine
  # The gradient itself is far from orthogonal: the check above could fail.
  s_g = np.linalg.svd(np.asarray(g, np.float64), compute_uv=False)
  assert s_g.max() / s_g.min() > 3


def test_muon_complex_matrix_is_near_unitary():
  """The iteration uses conjugate transposes, so a complex momentum gets a near-unitary factor."""
  g = jax.lax.complex(_normal(1, (6, 4)), _normal(2, (6, 4)))
  u = np.asarray(_one_muon_step(g), np.complex128)
  s = np.linalg.svd(u, compute_uv=False)
  assert s.min() > 0.5 and s.max() < 1.5, s


def test_muon_batch_axes_orthogonalize_each_matrix():
  """Axes outside the dimension numbers are batch axes: each slice is orthogonalized alone."""
  g = _normal(3, (5, 3, 4))
  u = _one_muon_step(g, weight_dimension_numbers=MuonDimensionNumbers(reduction_axis=1, output_axis=2))
  for i in range(3):
    np.testing.assert_allclose(u[i], _one_muon_step(g[i]), rtol=1e-5, atol=1e-6)


def test_muon_grouped_axes_orthogonalize_the_reshaped_matrix():
  """Several output axes are flattened into one: (embed, heads, head_dim) -> (embed, heads*head_dim)."""
  g = _normal(4, (6, 2, 3))
  u = _one_muon_step(g, weight_dimension_numbers=MuonDimensionNumbers(0, (1, 2)))
  expected = _one_muon_step(g.reshape(6, 6)).reshape(6, 2, 3)
  np.testing.assert_allclose(u, expected, rtol=1e-5, atol=1e-6)
  # Axes given in another order: the matrix is (out, in) read through the transposition.
  u_t = _one_muon_step(g.reshape(6, 6).T, weight_dimension_numbers=MuonDimensionNumbers(1, 0))
  np.testing.assert_allclose(u_t, expected.reshape(6, 6).T, rtol=1e-5, atol=1e-6)


def test_muon_matches_optax_on_a_batched_3d_weight():
  params = {"w": _normal(5, (2, 4, 3)), "b": _normal(6, (3,))}
  dims = {"w": MuonDimensionNumbers(1, 2), "b": None}
  ours = steadax.contrib.muon(0.1, muon_weight_dimension_numbers=dims)
  theirs = optax.contrib.muon(0.1, muon_weight_dimension_numbers={
      "w": optax.contrib.MuonDimensionNumbers(1, 2), "b": None})
  s1, s2 = ours.init(params), theirs.init(params)
  for step in range(3):
    grads = jax.tree_util.tree_map(lambda x: x * (1.0 + step) - 0.3, params)
    u1, s1 = ours.update(grads, s1, params)
    with jax.numpy_dtype_promotion("standard"):
      u2, s2 = theirs.update(grads, s2, params)
    for k in params:
      np.testing.assert_allclose(u1[k], u2[k], rtol=1e-5, atol=1e-6, err_msg=k)


def test_muon_sends_other_parameters_to_adamw():
  params = {"w": _normal(7, (4, 3)), "b": _normal(8, (3,)), "s": jnp.asarray(0.5, jnp.float32)}
  grads = jax.tree_util.tree_map(lambda x: 2.0 * x + 0.1, params)
  opt = steadax.contrib.muon(0.1, adam_b1=0.8, adam_learning_rate=0.03, adam_weight_decay=0.01)
  u, _ = opt.update(grads, opt.init(params), params)
  adamw = steadax.adamw(0.03, b1=0.8, weight_decay=0.01, nesterov=True)
  sub = {"b": params["b"], "s": params["s"]}
  expected, _ = adamw.update({"b": grads["b"], "s": grads["s"]}, adamw.init(sub), sub)
  for k in ("b", "s"):
    np.testing.assert_allclose(u[k], expected[k], rtol=1e-6)


def test_muon_width_scaling_and_consistent_rms():
  """Update scale: sqrt(max(1, fan_out / fan_in)) (Jordan) or c * sqrt(max(fan_in, fan_out))
  (Liu et al. 2025, whose point is an update RMS of about c whatever the shape)."""
  g = _normal(9, (3, 12))
  base = _one_muon_step(g)
  w = steadax.contrib.muon(1.0, beta=0.0, nesterov=False)
  u, _ = w.update(g, w.init(g), g)
  np.testing.assert_allclose(u, -2.0 * base, rtol=1e-6)
  c = steadax.contrib.muon(1.0, beta=0.0, nesterov=False, consistent_rms=0.2)
  u, _ = c.update(g, c.init(g), g)
  np.testing.assert_allclose(u, -0.2 * float(np.sqrt(12.0)) * base, rtol=1e-6)
  rms = float(jnp.sqrt(jnp.mean(u * u)))
  assert 0.12 < rms < 0.28, rms


def test_scale_by_muon_names_a_parameter_that_is_not_a_matrix():
  tx = steadax.contrib.scale_by_muon()
  params = {"layer": {"w": jnp.ones((2, 2)), "b": jnp.ones(2)}}
  with pytest.raises(ValueError, match=r"scale_by_muon.*\['layer'\]\['b'\]"):
    tx.update(params, tx.init(params))
  bad = steadax.contrib.scale_by_muon(weight_dimension_numbers=MuonDimensionNumbers(0, 0))
  with pytest.raises(ValueError, match="disjoint"):
    bad.update(jnp.ones((2, 2)), bad.init(jnp.ones((2, 2))))


@pytest.mark.parametrize("kwargs, match", [
    ({"ns_coeffs": "fast"}, "preset"),
    ({"ns_coeffs": (1.0, 2.0)}, "shape"),
    ({"ns_coeffs": ((1.0, 2.0, 3.0),) * 6}, "ns_steps"),
    ({"ns_steps": 0}, "ns_steps"),
    ({"beta": 1.0}, "beta"),
    ({"preconditioning": "qr"}, "preconditioning"),
])
def test_muon_rejects_bad_arguments(kwargs, match):
  with pytest.raises(ValueError, match=match):
    steadax.contrib.muon(0.1, **kwargs)


def test_muon_state_has_optax_structure_and_inits_from_abstract_params():
  params = {"w": jnp.ones((3, 2), jnp.bfloat16), "b": jnp.ones(2), "s": jnp.zeros([])}
  ours = steadax.contrib.muon(0.1)
  state = ours.init(params)
  reference = optax.contrib.muon(0.1).init(params)
  assert str(jax.tree_util.tree_structure(state)) == str(jax.tree_util.tree_structure(reference))
  # Optax's coefficients are a jnp.asarray of Python floats: JAX's default float (float64 under x64).
  assert state.inner_states["muon"].inner_state[0].ns_coeffs.dtype == reference.inner_states["muon"].inner_state[
      0].ns_coeffs.dtype
  abstract = jax.eval_shape(ours.init, params)
  assert jax.tree_util.tree_structure(abstract) == jax.tree_util.tree_structure(state)


def test_muon_converges_on_matrix_least_squares():
  """Convergence: Muon on ``||X W - Y||^2`` (well-conditioned, so spectral steps are effective)."""
  x, w_true = _normal(10, (32, 6)), _normal(11, (6, 4))
  y = x @ w_true
  loss = lambda p: 0.5 * jnp.mean(jnp.sum((x @ p["w"] + p["b"][None, :] - y) ** 2, axis=-1))
  params = {"w": jnp.zeros((6, 4), jnp.float32), "b": jnp.zeros(4, jnp.float32)}
  opt = steadax.contrib.muon(steadax.cosine_decay_schedule(0.1, 200))

  @jax.jit
  def run(params):
    def body(carry, _):
      p, s = carry
      u, s = opt.update(jax.grad(loss)(p), s, p)
      return (steadax.apply_updates(p, u), s), None
    return jax.lax.scan(body, (params, opt.init(params)), None, length=200)[0][0]

  initial = float(loss(params))
  final = float(loss(run(params)))
  assert final < 1e-3 * initial, (initial, final)


_SHARDING_SCRIPT = textwrap.dedent("""
    import json, re, jax, jax.numpy as jnp, optax, steadax
    from jax.sharding import NamedSharding, PartitionSpec as P, AxisType

    def collectives(fn, *args):
      compiled = jax.jit(fn).lower(*args).compile()
      text = compiled.as_text()
      ops = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
      return sum(len(re.findall(r"\\b" + op + r"(-start)?\\(", text)) for op in ops), compiled

    out = {"devices": jax.device_count()}
    dims3 = steadax.contrib.MuonDimensionNumbers(1, 2)
    cases = [("rows", (64, 32), P("d", None), None), ("cols", (32, 64), P(None, "d"), None),
             ("batch", (4, 16, 8), P("d", None, None), dims3)]
    for kind in ("Auto", "Explicit"):
      mesh = jax.make_mesh((2,), ("d",), axis_types=(getattr(AxisType, kind),))
      for name, shape, spec, dims in cases:
        g = jax.device_put(jnp.arange(float(jnp.prod(jnp.asarray(shape)))).reshape(shape) % 7.0 - 3.0,
                           NamedSharding(mesh, spec))
        counts = []
        for steps in (2, 8):
          tx = steadax.contrib.scale_by_muon(ns_steps=steps, weight_dimension_numbers=dims)
          state = tx.init(g)
          count, compiled = collectives(lambda g, s: tx.update(g, s), g, state)
          counts.append(count)
        u, s = compiled(g, state)
        ref = steadax.contrib.scale_by_muon(ns_steps=8, weight_dimension_numbers=dims)
        replicated = jax.device_put(g, NamedSharding(mesh, P()))
        plain = jax.jit(lambda g, s: ref.update(g, s)[0])(replicated, ref.init(g))
        out[f"{kind}/{name}"] = {"counts": counts, "mu_spec": str(s.mu.sharding.spec),
                                 "update_spec": str(u.sharding.spec), "param_spec": str(spec),
                                 "max_diff": float(jnp.max(jnp.abs(u - plain)))}
    # Control: Optax's iteration on the same sharded matrix holds collectives per step.
    mesh = jax.make_mesh((2,), ("d",), axis_types=(AxisType.Auto,))
    g = jax.device_put(jnp.ones((64, 32)), NamedSharding(mesh, P("d", None)))
    control = []
    for steps in (2, 8):
      tx = optax.contrib.scale_by_muon(ns_steps=steps)
      control.append(collectives(lambda g, s: tx.update(g, s), g, tx.init(g))[0])
    out["optax_control"] = control
    # SOAP, Shampoo and GaLore contract sharded axes too: under explicit axes they must gather
    # (a contraction over a sharded axis is a type error there); three steps in lax.scan.
    for kind, specs in (("Auto", (P(None, "d"),)), ("Explicit", (P("d", None), P(None, "d")))):
      mesh = jax.make_mesh((2,), ("d",), axis_types=(getattr(AxisType, kind),))
      for spec in specs:
        # Generic full-rank gradients: a gradient lying in the current eigenbasis would have rotated
        # entries at rounding level, which Adam's normalisation turns into +-1 steps that differ
        # with every change of summation order (sharded or not).
        w = jax.random.normal(jax.random.key(0), (16, 16))
        noise = jax.random.normal(jax.random.key(1), (3, 16, 16))
        params = {"w": jax.device_put(w, NamedSharding(mesh, spec)),
                  "b": jax.device_put(jnp.arange(16.0) / 16, NamedSharding(mesh, P("d")))}
        for name, tx in (("soap", steadax.soap(0.1, precondition_frequency=2)),
                         ("shampoo", steadax.shampoo(0.1, block_size=8, precondition_frequency=2)),
                         ("galore", steadax.contrib.galore(0.1, rank=4, update_proj_gap=2))):
          def run(p, noise, tx=tx):
            def body(carry, n):
              q, s = carry
              g = {"w": q["w"] + n, "b": q["b"]}
              u, s = tx.update(g, s, q)
              return (steadax.apply_updates(q, u), s), None
            return jax.lax.scan(body, (p, tx.init(p)), noise)[0][0]
          sharded = jax.jit(run)(params, jax.device_put(noise, NamedSharding(mesh, P(None, *spec))))
          plain = jax.jit(run)(jax.device_put(params, NamedSharding(mesh, P())),
                               jax.device_put(noise, NamedSharding(mesh, P())))
          out[f"{kind}/{spec}/{name}"] = {
              "max_diff": max(float(jnp.max(jnp.abs(sharded[k] - plain[k]))) for k in params),
              "spec": str(sharded["w"].sharding.spec), "param_spec": str(params["w"].sharding.spec)}
    print("RESULT" + json.dumps(out))
""")


@functools.lru_cache(maxsize=1)
def _sharding_results() -> dict:
  return run_for_result(["-c", _SHARDING_SCRIPT], devices=2)


@pytest.mark.slow
@pytest.mark.x32_only  # collective counts do not depend on the x64 flag; a 40 s subprocess
def test_muon_sharded_iteration_needs_a_constant_number_of_collectives():
  """On a weight sharded over a 2-device mesh (rows, columns, or the batch axis of stacked weights;
  Auto and Explicit mesh axes), the compiled step holds the same number of collectives for 2 and 8
  Newton-Schulz steps (one all-gather, none for batch-sharded stacks), its results match the
  unsharded computation and the momentum keeps the weight's sharding. Optax's iteration on the
  same weight is the control: its collective count grows with the number of steps."""
  result = _sharding_results()
  assert result["devices"] == 2
  for kind in ("Auto", "Explicit"):
    for name in ("rows", "cols", "batch"):
      case = result[f"{kind}/{name}"]
      few, many = case["counts"]
      assert few == many <= 1, (kind, name, case)
      assert case["max_diff"] < 1e-4, (kind, name, case)
      assert case["mu_spec"] == case["param_spec"], (kind, name, case)
    assert result[f"{kind}/batch"]["counts"] == [0, 0]
  few, many = result["optax_control"]
  assert many > few, result["optax_control"]


@pytest.mark.slow
@pytest.mark.x32_only  # the subprocess runs with x64 off whatever the pass (it pops JAX_ENABLE_X64)
def test_kronecker_optimizers_run_on_sharded_weights():
  """SOAP, Shampoo and GaLore gather a sharded matrix before contracting it (under explicit mesh axes
  a contraction over a sharded axis is a type error), give the unsharded results through three
  steps of lax.scan, and return parameters with their sharding (same subprocess as above; kept
  next to it so that one worker usually runs both and the subprocess once)."""
  result = _sharding_results()
  cases = {k: v for k, v in result.items() if k.endswith(("/soap", "/shampoo", "/galore"))}
  assert len(cases) == 9
  for name, case in cases.items():
    assert case["max_diff"] < 1e-4, (name, case)
    if name.startswith("Explicit"):
      assert case["spec"] == case["param_spec"], (name, case)


# --------------------------------------------------------------------------------------------------
# GaLore


def _galore_update(g, rank, **kwargs):
  tx = steadax.contrib.scale_by_galore(rank=rank, base_optimizer=steadax.scale_by_adam(), **kwargs)
  return tx.update(g, tx.init(g))


@pytest.mark.parametrize("shape", [(8, 5), (5, 8)])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.complex64])
def test_galore_update_has_the_projection_rank(shape, dtype):
  """Zhao et al. 2024, Algorithm 2: the update is ``P N`` (or ``N P^H``) with ``P`` the ``r`` leading
  singular vectors of the gradient, so it has rank at most ``r`` and lies in their span."""
  g = _normal(20, shape)
  if dtype == jnp.complex64:
    g = jax.lax.complex(g, _normal(21, shape))
  rank = 2
  u, state = _galore_update(g, rank)
  u = np.asarray(u, np.complex128)
  s = np.linalg.svd(u, compute_uv=False)
  assert np.sum(s > 1e-4 * s[0]) == rank, s
  p = np.asarray(state.projector, np.complex128)
  assert p.shape == (max(shape), rank)
  np.testing.assert_allclose(p.conj().T @ p, np.eye(rank), atol=1e-5)
  uu, _, vh = np.linalg.svd(np.asarray(g, np.complex128), full_matrices=False)
  if shape[0] >= shape[1]:
    span = uu[:, :rank]
    residual = u - span @ (span.conj().T @ u)
  else:
    span = vh[:rank].conj().T
    residual = u - (u @ span) @ span.conj().T
  assert np.abs(residual).max() < 1e-5 * np.abs(u).max()
  # The full-rank Adam step would have rank min(shape): the projection is what limits it.
  full = np.asarray(steadax.scale_by_adam().update(g, steadax.scale_by_adam().init(g))[0])
  assert np.linalg.matrix_rank(full, tol=1e-4) > rank


def test_galore_state_is_low_rank_and_refreshes_every_gap():
  params = {"w": _normal(22, (6, 4)), "b": _normal(23, (4,))}
  tx = steadax.contrib.scale_by_galore(rank=2, update_proj_gap=3)
  state = tx.init(params)
  assert state.base_optimizer_state.mu["w"].shape == (2, 4)
  assert state.base_optimizer_state.mu["b"].shape == (4,)
  assert state.projector["b"].shape == (0, 0)
  projectors = []
  for step in range(7):
    grads = {"w": _normal(100 + step, (6, 4)), "b": _normal(200 + step, (4,))}
    _, state = tx.update(grads, state)
    projectors.append(np.asarray(state.projector["w"]))
  changed = [not np.allclose(projectors[i], projectors[i - 1]) for i in range(1, 7)]
  # Refreshed at the updates with count 0, 3, 6 (before increment): the 4th and 7th.
  assert changed == [False, False, True, False, False, True]


def test_galore_dimension_numbers_project_the_reshaped_matrix():
  g = _normal(24, (4, 2, 3))
  dims = GaLoreDimensionNumbers(reduction_axis=0, output_axis=(1, 2))
  u, _ = _galore_update({"w": g}, 2, weight_dimension_numbers={"w": dims})
  expected, _ = _galore_update({"w": g.reshape(4, 6)}, 2)
  np.testing.assert_allclose(u["w"], expected["w"].reshape(4, 2, 3), rtol=1e-5, atol=1e-6)
  # An axis in neither field is a batch axis: each slice projected on its own.
  u, state = _galore_update({"w": g}, 2, weight_dimension_numbers={"w": GaLoreDimensionNumbers(0, 1)})
  assert state.projector["w"].shape == (3, 4, 2)
  for i in range(3):
    alone, _ = _galore_update({"w": g[:, :, i]}, 2)
    np.testing.assert_allclose(u["w"][:, :, i], alone["w"], rtol=1e-5, atol=1e-6)


def test_galore_matches_optax_with_dimension_numbers():
  params = {"w": _normal(25, (4, 2, 3)), "m": _normal(26, (3, 5)), "b": _normal(27, (3,))}
  spec = lambda o: {"w": o.contrib.GaLoreDimensionNumbers(0, (1, 2)),
                    "m": o.contrib.GaLoreDimensionNumbers(1, 0), "b": None}
  ours = steadax.contrib.galore(0.1, rank=2, update_proj_gap=2, weight_dimension_numbers=spec(steadax))
  theirs = optax.contrib.galore(0.1, rank=2, update_proj_gap=2, weight_dimension_numbers=spec(optax))
  s1, s2 = ours.init(params), theirs.init(params)
  for step in range(4):
    grads = jax.tree_util.tree_map(lambda x: x * (1.0 + 0.5 * step) + 0.2 * step, params)
    u1, s1 = ours.update(grads, s1, params)
    with jax.numpy_dtype_promotion("standard"):
      u2, s2 = theirs.update(grads, s2, params)
    for k in params:
      np.testing.assert_allclose(u1[k], u2[k], rtol=1e-4, atol=1e-6, err_msg=k)


@pytest.mark.parametrize("kwargs, error", [({"rank": 2.0}, TypeError), ({"rank": 0}, ValueError),
                                           ({"update_proj_gap": 0}, ValueError)])
def test_galore_rejects_bad_arguments(kwargs, error):
  with pytest.raises(error, match="galore"):
    steadax.contrib.galore(0.1, **kwargs)


def test_galore_converges_on_a_low_rank_regression():
  """Convergence: a rank-2 target is reachable from rank-2 projected steps (Zhao et al. 2024, §4)."""
  x = _normal(30, (40, 8))
  w_true = _normal(31, (8, 2)) @ _normal(32, (2, 6))
  y = x @ w_true
  loss = lambda p: 0.5 * jnp.mean(jnp.sum((x @ p["w"] - y) ** 2, axis=-1))
  params = {"w": jnp.zeros((8, 6), jnp.float32)}
  opt = steadax.contrib.galore(0.05, rank=2, update_proj_gap=10)

  @jax.jit
  def run(params):
    def body(carry, _):
      p, s = carry
      u, s = opt.update(jax.grad(loss)(p), s, p)
      return (steadax.apply_updates(p, u), s), None
    return jax.lax.scan(body, (params, opt.init(params)), None, length=300)[0][0]

  initial = float(loss(params))
  final = float(loss(run(params)))
  assert final < 1e-2 * initial, (initial, final)


@pytest.mark.parametrize("make, changes, match", [
    (steadax.contrib.scale_by_muon, {"beta": 1.0}, "scale_by_muon: beta"),
    (steadax.contrib.scale_by_muon, {"preconditioning": "qr"}, "scale_by_muon: preconditioning"),
    (steadax.contrib.scale_by_muon, {"ns_steps": 0}, "scale_by_muon: ns_steps"),
    (steadax.contrib.scale_by_galore, {"update_proj_gap": 0}, "scale_by_galore: update_proj_gap"),
])
def test_replace_validates_like_the_factory(make, changes, match):
  """Hyperparameters are checked by the class, so ``.replace`` rejects what the factory rejects."""
  with pytest.raises(ValueError, match=match):
    make().replace(**changes)
