"""steadax the way Flax uses Optax: Linen's TrainState and NNX's Optimizer, with integer leaves and
with parameters sharded over a device mesh (hijax and plain variables)."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import linen, nnx
from flax.training import train_state

import steadax
from tests.compile_flags import device_env

_X = jnp.linspace(-1.0, 1.0, 12, dtype=jnp.float32).reshape(4, 3)
_Y = jnp.asarray([[0.5], [-0.25], [1.0], [0.0]], jnp.float32)


# --------------------------------------------------------------------------------------------------
# Linen: a TrainState whose params hold an int32 leaf (a step counter, an index).


class _Dense(linen.Module):
  @linen.compact
  def __call__(self, x):
    return linen.Dense(1)(x)


def _linen_params():
  params = _Dense().init(jax.random.key(0), _X)["params"]
  return {"dense": params, "index": jnp.asarray(3, jnp.int32)}


def _linen_loss(params):
  pred = _Dense().apply({"params": params["dense"]}, _X)
  return jnp.mean((pred - _Y) ** 2)


def _train(state, steps):
  @jax.jit
  def step(state):
    # Flax's own pattern for trees with integer leaves: their gradient is float0.
    grads = jax.grad(_linen_loss, allow_int=True)(state.params)
    return state.apply_gradients(grads=grads)

  losses = []
  for _ in range(steps):
    losses.append(float(_linen_loss(state.params)))
    state = step(state)
  return state, losses


def _paths_and_dtypes(tree):
  return [(jax.tree_util.keystr(p), x.dtype) for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]]


TXS = {
    "adam": (lambda o: o.adam(0.05)),
    "sgd_momentum": (lambda o: o.sgd(0.1, momentum=0.9)),
}


@pytest.mark.parametrize("name", sorted(TXS))
def test_linen_train_state_with_an_integer_leaf(name):
  params = _linen_params()
  state = train_state.TrainState.create(apply_fn=None, params=params, tx=TXS[name](steadax))
  before = jax.tree_util.tree_map(lambda x: x.dtype, state.opt_state)
  state, losses = _train(state, 5)
  assert losses[-1] < 0.7 * losses[0]
  assert state.params["index"].dtype == jnp.int32 and int(state.params["index"]) == 3
  assert jax.tree_util.tree_map(lambda x: x.dtype, state.opt_state) == before
  # Optax creates the same state for the int leaf, but its update fails on the float0 gradient;
  # on the float leaves alone it is the reference.
  reference = TXS[name](optax)
  assert _paths_and_dtypes(reference.init(params)) == _paths_and_dtypes(TXS[name](steadax).init(params))
  ref_state = train_state.TrainState.create(apply_fn=None, params=params["dense"], tx=reference)

  @jax.jit
  def ref_step(s):
    return s.apply_gradients(grads=jax.grad(lambda p: _linen_loss({**params, "dense": p}))(s.params))

  with jax.numpy_dtype_promotion("standard"):  # Optax is not written for strict promotion
    for _ in range(5):
      ref_state = ref_step(ref_state)
  for a, b in zip(jax.tree_util.tree_leaves(state.params["dense"]), jax.tree_util.tree_leaves(ref_state.params)):
    np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)


# --------------------------------------------------------------------------------------------------
# NNX: nnx.Optimizer(model, tx, wrt=nnx.Param) with an integer Variable in the model.


class _Model(nnx.Module):
  def __init__(self, rngs):
    self.linear = nnx.Linear(3, 1, rngs=rngs)
    self.calls = nnx.Variable(jnp.asarray(0, jnp.int32))  # not a Param: not optimised

  def __call__(self, x):
    self.calls[...] += 1
    return self.linear(x)


def _nnx_run(tx, steps):
  model = _Model(nnx.Rngs(0))
  optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
  dtypes = jax.tree_util.tree_map(lambda x: x.dtype, nnx.state(optimizer))

  @nnx.jit
  def step(model, optimizer):
    loss, grads = nnx.value_and_grad(lambda m: jnp.mean((m(_X) - _Y) ** 2))(model)
    optimizer.update(model, grads)
    return loss

  losses = [float(step(model, optimizer)) for _ in range(steps)]
  assert jax.tree_util.tree_map(lambda x: x.dtype, nnx.state(optimizer)) == dtypes
  return model, losses


@pytest.mark.parametrize("name", sorted(TXS))
def test_nnx_optimizer_with_an_integer_variable(name):
  model, losses = _nnx_run(TXS[name](steadax), 5)
  assert losses[-1] < 0.7 * losses[0]
  assert model.calls[...].dtype == jnp.int32 and int(model.calls[...]) == 5
  with jax.numpy_dtype_promotion("standard"):  # Optax is not written for strict promotion
    ref_model, ref_losses = _nnx_run(TXS[name](optax), 5)
  np.testing.assert_allclose(losses, ref_losses, rtol=2e-5, atol=1e-6)
  np.testing.assert_allclose(model.linear.kernel[...], ref_model.linear.kernel[...], rtol=2e-5, atol=1e-6)


# --------------------------------------------------------------------------------------------------
# Sharded parameters on a 2x2 mesh of CPU devices (a subprocess: the device count is fixed when jax
# starts).

_SHARDING_SCRIPT = textwrap.dedent("""
    import json
    import jax, jax.numpy as jnp, optax
    from flax import nnx
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
    import steadax
    from steadax._core._roles import accumulator, role_zeros
    from steadax._core._tree import zeros_like

    steadax.set_strict(True)  # promotion stays "standard": Optax runs beside steadax here
    out = {"devices": jax.device_count()}

    class Model(nnx.Module):
      def __init__(self):
        self.w = nnx.Param(jnp.ones((4, 4)), sharding_names=("a", "b"))
        self.b = nnx.Param(jnp.zeros((4,)), sharding_names=("b",))
        self.calls = nnx.Variable(jnp.asarray(0, jnp.int32))

      def __call__(self, x):
        return x @ self.w[...] + self.b[...]

    def specs(tree):
      leaves = jax.tree_util.tree_leaves(tree, is_leaf=lambda x: isinstance(x, nnx.Variable))
      values = [l.get_value() if isinstance(l, nnx.Variable) else l for l in leaves]
      return sorted(str(v.sharding.spec) for v in values if v.ndim > 0)

    for kind in ("Explicit", "Auto"):
      mesh = jax.make_mesh((2, 2), ("a", "b"), axis_types=(getattr(AxisType, kind),) * 2)
      with jax.set_mesh(mesh):
        sds = jax.ShapeDtypeStruct((4, 4), jnp.float32, sharding=NamedSharding(mesh, P("a", "b")))
        out[f"{kind}/sds/zeros_like"] = str(zeros_like({"w": sds})["w"].sharding.spec)
        out[f"{kind}/sds/role_zeros"] = str(
            role_zeros({"w": sds}, accumulator(), steadax.scale_by_adam())["w"].sharding.spec)
        for hijax in (False, True):
          with nnx.var_defaults(hijax=hijax):
            model = Model()
          params = nnx.state(model, nnx.Param)
          out[f"{kind}/{hijax}/params"] = specs(params)
          for name, make in (("adam", lambda o: o.adam(0.1)), ("sgd_momentum", lambda o: o.sgd(0.1, 0.9))):
            for lib, o in (("steadax", steadax), ("optax", optax)):
              tx = make(o)
              out[f"{kind}/{hijax}/{name}/{lib}/init"] = specs(tx.init(params))
              out[f"{kind}/{hijax}/{name}/{lib}/optimizer"] = specs(nnx.Optimizer(model, tx, wrt=nnx.Param).opt_state)
              if kind == "Explicit":  # with automatic axes the compiler places values made under jit
                try:
                  out[f"{kind}/{hijax}/{name}/{lib}/jit_init"] = specs(jax.jit(tx.init)(params))
                except Exception as e:
                  out[f"{kind}/{hijax}/{name}/{lib}/jit_init"] = type(e).__name__
            optimizer = nnx.Optimizer(model, make(steadax), wrt=nnx.Param)

            @nnx.jit
            def step(model, optimizer):
              grads = nnx.grad(lambda m: jnp.sum(m(jnp.ones((2, 4))) ** 2))(model)
              optimizer.update(model, grads)

            if hijax:
              # nnx.jit and nnx.grad do not take hijax variables yet (Flax 0.12.8, with Optax too):
              # an eager update with the parameters as gradients.
              optimizer.update(model, nnx.state(model, nnx.Param))
            else:
              step(model, optimizer)
            out[f"{kind}/{hijax}/{name}/after_step"] = specs(optimizer.opt_state)
    print("RESULT" + json.dumps(out))
""")


@functools.lru_cache(maxsize=1)
def _sharding_results() -> dict:
  env = device_env(4)
  proc = subprocess.run([sys.executable, "-c", _SHARDING_SCRIPT], capture_output=True, text=True,
                        env=env, timeout=600)
  assert proc.returncode == 0, proc.stderr[-4000:]
  line = next(l for l in proc.stdout.splitlines() if l.startswith("RESULT"))
  return json.loads(line[len("RESULT"):])


@pytest.mark.x32_only  # placement does not depend on the x64 flag; one subprocess
def test_state_keeps_the_sharding_of_nnx_params_on_a_2x2_mesh():
  """Adam's and momentum's state of NNX Params sharded on a 2x2 mesh (plain and hijax variables,
  explicit and automatic mesh axes) has the Params' shardings: from ``tx.init``, from
  ``nnx.Optimizer``, from ``jax.jit(tx.init)`` (explicit axes) and after a jitted step; as Optax's."""
  result = _sharding_results()
  assert result["devices"] == 4
  for kind in ("Explicit", "Auto"):
    assert result[f"{kind}/sds/zeros_like"] == result[f"{kind}/sds/role_zeros"] == "P('a', 'b')"
    for hijax in ("False", "True"):
      params = result[f"{kind}/{hijax}/params"]
      assert params == ["P('a', 'b')", "P('b',)"], params
      for name, copies in (("adam", 2), ("sgd_momentum", 1)):
        want = sorted(params * copies)
        for how in ("init", "optimizer", "jit_init"):
          key = f"{kind}/{hijax}/{name}/steadax/{how}"
          if key in result:
            assert result[key] == want, (key, result[key])
            assert result[key] == result[key.replace("steadax", "optax")], key
        assert result[f"{kind}/{hijax}/{name}/after_step"] == want
