"""fuse: the fused multi-tensor path gives the unfused results with a few flat state buffers."""

import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax
from steadax._fusion._flat import FusedLayout
from tests.compile_flags import device_env


def _params(wide=False):
  if wide and jax.config.jax_enable_x64:
    # Under x64, a float64 buffer beside the float32 and bfloat16 ones.
    return {**_params(), "d": [jnp.linspace(0.0, 1.0, 4), jnp.linspace(1.0, 2.0, 5)]}
  return {
      "b": [jnp.linspace(-1.0, 1.0, 7, dtype=jnp.float32), jnp.linspace(0.5, 2.0, 3, dtype=jnp.float32)],
      "h": {"x": jnp.linspace(-2.0, 2.0, 6, dtype=jnp.bfloat16), "y": jnp.ones((2, 2), jnp.bfloat16)},
      "s": jnp.asarray(0.3, jnp.float32),
      "w": jnp.linspace(-1.0, 1.0, 40, dtype=jnp.float32).reshape(5, 8),  # larger than max_leaf_size below: kept
      "step": jnp.asarray(3, jnp.int32),
  }


def _grads(params, t):
  def g(p):
    if not jnp.issubdtype(p.dtype, jnp.inexact):
      return np.zeros(p.shape, jax.dtypes.float0)
    return (jnp.sin(p.astype(jnp.float32) * (t + 1.0)) + 0.1).astype(p.dtype)
  return jax.tree_util.tree_map(g, params)


ELEMENTWISE = {
    "adamw": lambda: steadax.adamw(0.05, weight_decay=1e-2),
    "sgd_nesterov": lambda: steadax.sgd(0.1, momentum=0.9, nesterov=True),
    "lion": lambda: steadax.lion(0.01),
    "rmsprop": lambda: steadax.rmsprop(0.01, momentum=0.5),
    "adagrad": lambda: steadax.adagrad(0.1),
    "multisteps_adam": lambda: steadax.MultiSteps(steadax.adam(0.1), 2),
    "inject_adamw": lambda: steadax.inject_hyperparams(steadax.adamw)(
        learning_rate=steadax.linear_schedule(0.1, 0.01, 4)),
    "schedule_free": lambda: steadax.contrib.schedule_free_adamw(0.05),
    "apply_if_finite": lambda: steadax.apply_if_finite(steadax.adam(0.1), 2),
}
REDUCING = {
    "clip_global_norm_adam": lambda: steadax.chain(steadax.clip_by_global_norm(0.5), steadax.adam(0.1)),
    "prodigy": lambda: steadax.contrib.prodigy(1.0),
}


def _run(make, steps=3):
  """Both runs in one jitted scan: the fused run's updates and unfused state, and the plain run's."""
  params = _params(wide=True)
  plain, fast = make(), steadax.fuse(make(), max_leaf_size=16)

  @jax.jit
  def go():
    def body(carry, t):
      s, fs = carry
      g = _grads(params, t)
      u, s = plain.update(g, s, params)
      fu, fs = fast.update(g, fs, params)
      return (s, fs), (u, fu)
    (s, fs), (u, fu) = jax.lax.scan(body, (plain.init(params), fast.init(params)),
                                   jnp.arange(steps, dtype=jnp.float32))
    return s, fs, u, fu

  return fast, go()


@pytest.mark.parametrize("name", sorted(ELEMENTWISE) + sorted(REDUCING))
def test_fused_equals_unfused(name):
  make = {**ELEMENTWISE, **REDUCING}[name]
  fast, (s, fs, u, fu) = _run(make)
  assert jax.tree_util.tree_structure(fu) == jax.tree_util.tree_structure(u)
  unfused = fast.unfused_state(fs)
  assert jax.tree_util.tree_structure(unfused) == jax.tree_util.tree_structure(s)
  for a, b in zip(jax.tree_util.tree_leaves((u, s)), jax.tree_util.tree_leaves((fu, unfused))):
    assert a.dtype == b.dtype and a.shape == b.shape
    if not jnp.issubdtype(a.dtype, jnp.inexact):
      np.testing.assert_array_equal(a, b)
    elif name in ELEMENTWISE:
      # The same maths on concatenated leaves: equal up to XLA ordering a kernel's arithmetic
      # differently (a unit in the last place, seen for schedule_free's interpolation).
      eps = float(jnp.finfo(a.dtype).eps)
      np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=2 * eps, atol=eps)
    else:
      # A whole-tree sum in another order: equal to rounding.
      np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=2e-2, atol=1e-6)


def test_state_holds_one_buffer_per_dtype_and_keeps_large_and_integer_leaves():
  tx = steadax.fuse(steadax.adam(0.1), max_leaf_size=16)
  state = tx.init(_params())
  mu = state.inner_state[0].mu
  # 7 + 3 + 1 float32 elements (the scalar included), 6 + 4 bfloat16 ones.
  assert mu["float32"].shape == (11,) and mu["float32"].dtype == jnp.float32
  assert mu["bfloat16"].shape == (10,) and mu["bfloat16"].dtype == jnp.bfloat16
  assert mu["['w']"].shape == (5, 8) and mu["['step']"].dtype == jnp.int32
  assert set(mu) == {"float32", "bfloat16", "['w']", "['step']"}
  assert "float32: 3 leaves, 11 elements" in repr(state.layout)
  # 5 state arrays instead of one per leaf and moment (count + 2 moments x 6 floating leaves).
  assert len(jax.tree_util.tree_leaves(state)) == 1 + 2 * 4


def test_state_type_stable_under_jit_cond_and_while():
  tx = steadax.fuse(steadax.adamw(0.1))
  params = _params()
  state = tx.init(params)

  @jax.jit
  def loop(state):
    def body(i, s):
      g = _grads(params, i.astype(jnp.float32))
      return jax.lax.cond(i % 2 == 0, lambda s: tx.update(g, s, params)[1], lambda s: s, s)
    return jax.lax.fori_loop(0, 3, body, state)

  out = loop(state)
  assert jax.tree_util.tree_structure(out) == jax.tree_util.tree_structure(state)
  assert [(x.shape, x.dtype) for x in jax.tree_util.tree_leaves(out)] == [
      (x.shape, x.dtype) for x in jax.tree_util.tree_leaves(state)]
  abstract = jax.eval_shape(tx.init, params)
  assert jax.tree_util.tree_structure(abstract) == jax.tree_util.tree_structure(state)


def test_fused_state_round_trip_resumes_an_unfused_run():
  params = _params()
  plain, fast = steadax.adam(0.1), steadax.fuse(steadax.adam(0.1), max_leaf_size=16)
  s = plain.update(_grads(params, 0.0), plain.init(params), params)[1]
  fs = fast.fused_state(s, params)
  assert fs.layout == fast.init(params).layout
  back = fast.unfused_state(fs)
  for a, b in zip(jax.tree_util.tree_leaves(s), jax.tree_util.tree_leaves(back)):
    np.testing.assert_array_equal(np.asarray(a, np.float64), np.asarray(b, np.float64))
  g = _grads(params, 1.0)
  np.testing.assert_array_equal(plain.update(g, s, params)[0]["b"][0], fast.update(g, fs, params)[0]["b"][0])


@pytest.mark.parametrize("make, piece", [
    (lambda: steadax.adafactor(0.1), "scale_by_factored_rms"),
    (lambda: steadax.adamw(0.1, mask=lambda p: jax.tree_util.tree_map(lambda _: True, p)), "masked"),
    (lambda: steadax.contrib.muon(0.1), "partition"),
    (lambda: steadax.lbfgs(), "linesearch"),
    (lambda: steadax.chain(steadax.adam(0.1), steadax.scale_by_trust_ratio()), "scale_by_trust_ratio"),
    (lambda: steadax.GradientTransformation(lambda p: (), lambda u, s, p=None: (u, s)), "function pair"),
    # Its grad_fn is the caller's function of the parameters: fuse would call it on the buffers.
    (lambda: steadax.contrib.sam(steadax.sgd(0.1), steadax.sgd(0.05), opaque_mode=True), "sam .*grad_fn"),
])
def test_refuses_transformations_that_are_not_elementwise(make, piece):
  with pytest.raises(ValueError, match=f"fuse: cannot fuse .*{piece}"):
    steadax.fuse(make())


def test_opaque_sam_runs_on_flat_params_whose_grad_fn_reads_them():
  # fuse refuses opaque SAM (above); on FlatParams its grad_fn gets FlatParams, read with .tree().
  params = {"a": jnp.asarray([1.0, -2.0], jnp.float32), "b": jnp.asarray([0.5], jnp.float32)}
  loss = lambda p: sum(jnp.sum(x ** 2) for x in jax.tree_util.tree_leaves(p))
  tx = steadax.contrib.sam(steadax.sgd(0.1), steadax.sgd(0.05), opaque_mode=True)
  flat = steadax.flat_params(params)
  u, _ = tx.update(jax.grad(loss)(params), tx.init(params), params,
                   grad_fn=lambda p, i: jax.grad(loss)(p))
  fu, _ = tx.update(jax.grad(lambda f: loss(f.tree()))(flat), tx.init(flat), flat,
                    grad_fn=lambda f, i: jax.grad(lambda f: loss(f.tree()))(f))
  for a, b in zip(jax.tree_util.tree_leaves(u), jax.tree_util.tree_leaves(fu.tree())):
    np.testing.assert_allclose(b, a, rtol=1e-6)


def test_bad_input_names_the_path():
  tx = steadax.fuse(steadax.sgd(0.1))
  params = {"a": jnp.zeros(3, jnp.float32), "b": jnp.zeros(2, jnp.float32)}
  state = tx.init(params)
  with pytest.raises(ValueError, match=r"updates at \['b'\] is float32\[3\].*shape \[2\]"):
    tx.update({"a": jnp.zeros(3, jnp.float32), "b": jnp.zeros(3, jnp.float32)}, state)
  with pytest.raises(ValueError, match="tree structure the fused state was built for"):
    tx.update({"a": jnp.zeros(3, jnp.float32)}, state)
  with pytest.raises(ValueError, match="max_leaf_size"):
    steadax.fuse(steadax.sgd(0.1), max_leaf_size=-1)


def test_leaves_of_a_shape_shared_by_more_than_max_same_shape_stay_leaves():
  # Six identical layers and two odd leaves: by default the layers' leaves stay leaves (per leaf,
  # XLA compiles one kernel for identical layers; as pieces of a buffer each gets its own), and
  # the odd ones share a buffer. None buffers everything; the limit counts leaves per shape.
  f32 = jnp.float32
  params = {f"l{i}": {"w": jnp.zeros((4, 4), f32), "b": jnp.zeros(4, f32)} for i in range(6)}
  params.update(x=jnp.zeros(7, f32), y=jnp.zeros((2, 3), f32))
  default = steadax.flat_params(params).layout
  assert [(g[0], len(g[2])) for g in default.groups] == [("float32", 2)]
  assert len(default.singles) == 12
  assert steadax.fuse(steadax.sgd(0.1)).init(params).layout == default
  for limit in (None, 6):
    everything = steadax.flat_params(params, max_same_shape=limit).layout
    assert [len(g[2]) for g in everything.groups] == [14] and not everything.singles
    assert steadax.fuse(steadax.sgd(0.1), max_same_shape=limit).init(params).layout == everything
  assert len(steadax.flat_params(params, max_same_shape=5).layout.singles) == 12
  for bad in (0, -1, 2.0, True):
    with pytest.raises(ValueError, match="max_same_shape"):
      steadax.flat_params(params, max_same_shape=bad)
    with pytest.raises(ValueError, match="max_same_shape"):
      steadax.fuse(steadax.sgd(0.1), max_same_shape=bad)


def test_layout_keeps_partitioned_leaves_out_of_buffers():
  devices = np.array(jax.devices()[:1])
  mesh = jax.sharding.Mesh(devices, ("x",))
  replicated = jax.device_put(jnp.zeros(4), jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))
  layout = FusedLayout.build({"a": replicated, "b": jnp.zeros(3)}, 16)
  assert layout.groups and not layout.singles  # replicated leaves share a buffer


def test_updates_without_params_take_the_gradients_dtypes():
  tx = steadax.fuse(steadax.sgd(0.1))
  params = {"a": jnp.zeros(3, jnp.float32), "b": jnp.zeros(2, jnp.float32)}
  u, _ = tx.update({"a": jnp.ones(3, jnp.bfloat16), "b": jnp.ones(2, jnp.float32)}, tx.init(params))
  assert u["a"].dtype == jnp.bfloat16 and u["b"].dtype == jnp.float32


_TWO_DEVICES = textwrap.dedent("""
    import jax, jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import steadax
    mesh = Mesh(jax.devices(), ("x",))
    split, whole = NamedSharding(mesh, P("x")), NamedSharding(mesh, P())
    params = {"w": jax.device_put(jnp.ones(8), split), "b": jax.device_put(jnp.ones(3), whole),
              "c": jax.device_put(jnp.ones(5), whole)}
    tx = steadax.fuse(steadax.adamw(0.1))
    state = tx.init(params)
    assert state.inner_state[0].mu["['w']"].sharding == split, state.inner_state[0].mu["['w']"].sharding
    assert state.inner_state[0].mu["float32"].shape == (8,)  # b and c only

    def step(params, state):
      updates, state = tx.update(params, state, params)
      return steadax.apply_updates(params, updates), state

    compiled = jax.jit(step).lower(params, state).compile()
    assert "all-gather" not in compiled.as_text()
    new_params, new_state = compiled(params, state)
    assert new_params["w"].sharding.is_equivalent_to(split, 1)
    assert new_state.inner_state[0].mu["['w']"].sharding.is_equivalent_to(split, 1)
    print("OK")
""")


@pytest.mark.x32_only  # a subprocess on a 2-device host mesh; sharding does not depend on x64
def test_sharded_leaves_stay_out_of_buffers_and_are_never_gathered():
  env = device_env(2)
  result = subprocess.run([sys.executable, "-c", _TWO_DEVICES], env=env, capture_output=True,
                          text=True, timeout=300)
  assert result.returncode == 0 and "OK" in result.stdout, result.stderr[-3000:]
