"""``steadax.dimension_numbers_from``: dimension numbers read from the axis names a model carries.

A Flax NNX model stacked by ``nnx.vmap`` (and run by ``nnx.scan``), a Linen ``nn.scan`` model and
plain arrays: the tree derived in one call names the stacked axis a batch axis, is a prefix of
what each client gives the optimizer (``nnx.Optimizer``, a ``TrainState`` with boxed or unboxed
parameters), and Muon given it updates each layer of a stack as it updates that layer alone.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen, nnx
from flax.training import train_state
from jax.sharding import PartitionSpec as P

import steadax
from steadax import WeightDimensionNumbers as Dims

LAYERS, D = 3, 4


def _per_layer_matches_stacked(tx_of, params, dims, stacked_paths):
  """Muon's update of each stacked weight equals, slice by slice, its update of that slice alone."""
  grads = jax.tree_util.tree_map(lambda p: jnp.sin(3.0 * p + 1.0), params)
  tx = tx_of(dims)
  stacked, _ = jax.jit(tx.update)(grads, tx.init(params), params)
  for path in stacked_paths:
    get = lambda tree: tree[path[0]][path[1]][path[2]] if len(path) == 3 else tree[path[0]][path[1]]
    for layer in range(LAYERS):
      alone = {"w": get(params)[layer]}
      single = tx_of({"w": Dims(0, tuple(range(1, alone["w"].ndim)) if alone["w"].ndim > 2 else 1)})
      expected, _ = jax.jit(single.update)({"w": get(grads)[layer]}, single.init(alone), alone)
      np.testing.assert_allclose(get(stacked)[layer], expected["w"], rtol=2e-5, atol=1e-6)


def _muon(dims):
  return steadax.contrib.muon(0.1, muon_weight_dimension_numbers=dims)


# -- Flax NNX: nnx.vmap builds the stack, nnx.scan runs it ----------------------------------------------

def _named(*names):
  return nnx.with_partitioning(nnx.initializers.lecun_normal(), names)


class _Block(nnx.Module):
  def __init__(self, rngs):
    self.query = nnx.LinearGeneral(D, (2, D // 2), kernel_init=_named("embed", "heads", "kv"),
                                   use_bias=False, rngs=rngs)
    self.up = nnx.Linear(D, 2 * D, kernel_init=_named("embed", "mlp"),
                         bias_init=nnx.with_partitioning(nnx.initializers.zeros_init(), ("mlp",)),
                         rngs=rngs)
    self.down = nnx.Linear(2 * D, D, use_bias=False, rngs=rngs)  # no names: `stacked` says

  def __call__(self, x):
    h = self.query(x).reshape(x.shape) + x
    return x + self.down(jax.nn.gelu(self.up(h)))


class _Model(nnx.Module):
  def __init__(self, rngs):
    @nnx.split_rngs(splits=LAYERS)
    @nnx.vmap(in_axes=(0,), out_axes=0, transform_metadata={nnx.PARTITION_NAME: "layers"})
    def make(rngs):
      return _Block(rngs)

    self.blocks = make(rngs)
    self.head = nnx.Linear(D, 1, rngs=rngs)

  def __call__(self, x):
    @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry,
              transform_metadata={nnx.PARTITION_NAME: "layers"})
    def body(x, block):
      return block(x)

    return self.head(body(x, self.blocks))


@pytest.fixture(scope="module")
def nnx_model():
  with nnx.use_eager_sharding(False):  # names as metadata, no device mesh
    return _Model(nnx.Rngs(0))


def test_nnx_stacked_axis_names_become_batch_axes(nnx_model):
  state = nnx.state(nnx_model, nnx.Param)
  assert state["blocks"]["up"]["kernel"].get_metadata()["out_sharding"] == ("layers", "embed", "mlp")
  dims = steadax.dimension_numbers_from(state, batch_axes="layers", stacked={"blocks.*": 1})
  assert isinstance(dims, nnx.State)
  assert dims["blocks"]["query"]["kernel"] == Dims(1, (2, 3))   # (layers, embed, heads, kv)
  assert dims["blocks"]["up"]["kernel"] == Dims(1, 2)
  assert dims["blocks"]["up"]["bias"] is None                    # (layers, mlp): a stack of vectors
  assert dims["blocks"]["down"]["kernel"] == Dims(1, 2)          # unnamed, read by `stacked`
  assert dims["head"]["kernel"] == Dims(0, 1) and dims["head"]["bias"] is None
  # Without `stacked` the unnamed stacked kernel looks unstacked (documented): the reason for it.
  plain = steadax.dimension_numbers_from(state, batch_axes=("layers",))
  assert plain["blocks"]["down"]["kernel"] == Dims(0, (1, 2))
  # The module itself: its nnx.Param state is read.
  from_module = steadax.dimension_numbers_from(nnx_model, batch_axes="layers", stacked={"blocks.*": 1})
  assert jax.tree_util.tree_leaves(from_module) == jax.tree_util.tree_leaves(dims)


def test_nnx_optimizer_trains_the_scanned_model_with_the_derived_tree(nnx_model):
  model = nnx.clone(nnx_model)
  dims = steadax.dimension_numbers_from(model, batch_axes="layers", stacked={"blocks.*": 1})
  # init sees an nnx.State of Param variables, update one of plain arrays: a prefix of both.
  optimizer = nnx.Optimizer(model, _muon(dims), wrt=nnx.Param)
  x = jnp.linspace(-1.0, 1.0, 5 * D, dtype=jnp.float32).reshape(5, D)

  @nnx.jit
  def step(model, optimizer):
    loss, grads = nnx.value_and_grad(lambda m: jnp.mean(m(x) ** 2))(model)
    optimizer.update(model, grads)
    return loss

  losses = [float(step(model, optimizer)) for _ in range(3)]
  assert losses[-1] < losses[0]
  # The state of a stacked weight is stacked like it.
  mu = steadax.state_get(optimizer.opt_state, "mu", label="muon")
  assert mu is not None and any(getattr(v, "shape", None) == (LAYERS, D, 2 * D)
                                for v in jax.tree_util.tree_leaves(mu))


def test_nnx_muon_updates_each_layer_as_alone(nnx_model):
  state = nnx.state(nnx_model, nnx.Param)
  dims = steadax.dimension_numbers_from(state, batch_axes="layers", stacked={"blocks.*": 1})
  pure = nnx.to_pure_dict(state)  # the derived nnx.State is a prefix of a plain dict too
  _per_layer_matches_stacked(_muon, pure, dims, [("blocks", "up", "kernel"),
                                                 ("blocks", "query", "kernel"),
                                                 ("blocks", "down", "kernel")])


# -- Linen: nn.scan with metadata_params ------------------------------------------------------------

class _LinenBlock(linen.Module):
  @linen.compact
  def __call__(self, x, _):
    h = linen.Dense(2 * D, kernel_init=linen.with_partitioning(
        linen.initializers.lecun_normal(), ("embed", "mlp")), bias_init=linen.with_logical_partitioning(
            linen.initializers.zeros, ("mlp",)), name="up")(x)
    return x + linen.Dense(D, use_bias=False, name="down")(jax.nn.gelu(h)), None


class _LinenModel(linen.Module):
  @linen.compact
  def __call__(self, x):
    stack = linen.scan(_LinenBlock, variable_axes={"params": 0}, split_rngs={"params": True},
                       length=LAYERS, metadata_params={linen.PARTITION_NAME: "layers"})
    x, _ = stack(name="blocks")(x, None)
    return linen.Dense(1, name="head")(x)


def test_linen_scan_boxed_and_unboxed_train_states():
  x = jnp.linspace(-1.0, 1.0, 5 * D, dtype=jnp.float32).reshape(5, D)
  model = _LinenModel()
  boxed = model.init(jax.random.key(0), x)["params"]
  assert boxed["blocks"]["up"]["kernel"].names == ("layers", "embed", "mlp")
  dims = steadax.dimension_numbers_from(boxed, batch_axes="layers",
                                        stacked={"blocks.down.*": 1}, override={"head.*": None})
  assert dims == {"blocks": {"up": {"kernel": Dims(1, 2), "bias": None},
                             "down": {"kernel": Dims(1, 2)}},
                  "head": {"kernel": None, "bias": None}}
  # The same tree from the unboxed parameters and Linen's own PartitionSpec tree.
  unboxed = linen.unbox(boxed)
  assert steadax.dimension_numbers_from(
      unboxed, batch_axes="layers", axis_names=linen.get_partition_spec(boxed),
      stacked={"blocks.down.*": 1}, override={"head.*": None}) == dims

  def loss(params):
    return jnp.mean(model.apply({"params": params}, x) ** 2)

  for params in (boxed, unboxed):  # a prefix of both
    state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=_muon(dims))
    state = jax.jit(lambda s: s.apply_gradients(grads=jax.grad(loss)(s.params)))(state)
    assert int(state.step) == 1


# -- plain arrays ----------------------------------------------------------------------------------

def test_plain_arrays_with_axis_names_stacked_and_override():
  params = {"embed": jnp.ones((16, D)), "layers": {"w": jnp.ones((LAYERS, 2, D, D)),
                                                   "b": jnp.ones((LAYERS, D)),
                                                   "out": jnp.ones((LAYERS, 2, 2, D))},
            "scale": jnp.ones(()), "skip": None}
  names = {"embed": P("vocab", "embed"), "layers": {"w": P("layers", "experts", "embed", "mlp"),
                                                    "b": P("layers", "mlp"), "out": P()},
           "scale": P(), "skip": None}
  dims = steadax.dimension_numbers_from(
      params, batch_axes=("layers", "experts"), axis_names=names, stacked={"layers.out": 1})
  assert dims == {"embed": Dims(0, 1), "layers": {"w": Dims(2, 3), "b": None,
                                                  "out": Dims(1, (2, 3))},
                  "scale": None, "skip": None}
  # An output projection (layers, heads, head_dim, embed): the rank rule is wrong, `override` says.
  fixed = steadax.dimension_numbers_from(
      params, batch_axes=("layers", "experts"), axis_names=names, stacked={"layers.out": 1},
      override={"layers.out": Dims(reduction_axis=(1, 2), output_axis=3), "embed": None})
  assert fixed["layers"]["out"] == Dims((1, 2), 3) and fixed["embed"] is None
  # A tuple of mesh axes naming one axis is a batch axis if any of them is a batch name.
  assert steadax.dimension_numbers_from(
      {"w": jnp.ones((2, 3, 4))}, batch_axes="stage", axis_names={"w": P(("stage", "fsdp"), None)}
  ) == {"w": Dims(1, 2)}
  # Abstract parameters work alike; no names and no `stacked`: the rank rule.
  abstract = jax.eval_shape(lambda: params)
  assert steadax.dimension_numbers_from(abstract)["layers"]["w"] == Dims(0, (1, 2, 3))


def test_errors_name_the_parameter():
  params = {"a": {"w": jnp.ones((2, 3))}}
  with pytest.raises(ValueError, match=r"dimension_numbers_from.*\['a'\]\['w'\].*3 axis names"):
    steadax.dimension_numbers_from(params, axis_names={"a": {"w": P("x", "y", "z")}})
  with pytest.raises(ValueError, match="`axis_names` does not have the parameters' structure"):
    steadax.dimension_numbers_from(params, axis_names={"b": {"w": P()}})
  with pytest.raises(ValueError, match=r"dimension_numbers_from.*out of range.*\['a'\]\['w'\]"):
    steadax.dimension_numbers_from(params, override={"a.w": Dims(0, 2)})
  with pytest.raises(ValueError, match=r"`stacked` gives the parameter at \['a'\]\['w'\]"):
    steadax.dimension_numbers_from(params, stacked={"a.*": 3})
  with pytest.raises(TypeError, match="`override` maps path patterns"):
    steadax.dimension_numbers_from(params, override={"a.w": (0, 1)})
  with pytest.raises(TypeError, match="`stacked` maps path patterns"):
    steadax.dimension_numbers_from(params, stacked={"a.w": True})
