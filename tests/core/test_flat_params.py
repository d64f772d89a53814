"""FlatParams: parameters held as flat buffers give the per-leaf results with a few arrays."""

import re

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax
from steadax._fusion._elementwise import fusion_blocker
from steadax.testing import type_signature
from tests.conformance import _harness
from tests.conformance.registry import all_entries

MAX = 16  # leaves above this many elements stay leaves in these tests


def _params():
  p = {
      "b": [jnp.linspace(-1.0, 1.0, 7, dtype=jnp.float32), jnp.linspace(0.5, 2.0, 3, dtype=jnp.float32)],
      "h": {"x": jnp.linspace(-2.0, 2.0, 6, dtype=jnp.bfloat16), "y": jnp.ones((2, 2), jnp.bfloat16)},
      "s": jnp.asarray(0.3, jnp.float32),
      "w": jnp.linspace(-1.0, 1.0, 40, dtype=jnp.float32).reshape(5, 8),  # kept: above MAX
      "z": jnp.zeros((0, 3), jnp.float32),
  }
  if jax.config.jax_enable_x64:
    p["d"] = [jnp.linspace(0.0, 1.0, 4), jnp.linspace(1.0, 2.0, 5)]
  return p


def _loss(params):
  return _harness.matrix_loss(params)


def test_tree_gives_back_the_parameters():
  params = {**_params(), "step": jnp.asarray(3, jnp.int32), "none": None}
  flat = steadax.flat_params(params, max_leaf_size=MAX)
  assert set(flat.buffers) == {"float32", "bfloat16", "['w']", "['step']", "['none']"} | (
      {"float64"} if jax.config.jax_enable_x64 else set())
  # 7 + 3 + 1 + 0 float32 elements (the scalar and the zero-size leaf included), 6 + 4 bfloat16.
  assert flat["float32"].shape == (11,) and flat["bfloat16"].shape == (10,)
  back = flat.tree()
  assert jax.tree_util.tree_structure(back) == jax.tree_util.tree_structure(params)
  assert type_signature(back) == type_signature(params)
  for a, b in zip(jax.tree_util.tree_leaves(back), jax.tree_util.tree_leaves(params)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert steadax.unflatten_params({"x": flat})["x"]["b"][1].shape == (3,)
  assert steadax.flat_params(flat) is flat


def test_gradient_of_flat_params_is_flat_and_equals_the_per_leaf_gradient():
  params = _params()
  flat = steadax.flat_params(params, max_leaf_size=MAX)
  grads = jax.grad(lambda f: _loss(f.tree()))(flat)
  assert isinstance(grads, steadax.FlatParams) and grads.layout == flat.layout
  expected = jax.grad(_loss)(params)
  assert type_signature(grads.tree()) == type_signature(expected)
  for a, b in zip(jax.tree_util.tree_leaves(grads.tree()), jax.tree_util.tree_leaves(expected)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  # One split forward, one concatenation back: no per-leaf pad of the whole buffer.
  jaxpr = str(jax.make_jaxpr(jax.grad(lambda f: _loss(f.tree())))(flat))
  assert jaxpr.count("split[") == len(flat.layout.groups)
  assert jaxpr.count(" pad[") == 0


def _elementwise_entries():
  # fuse over FlatParams runs (a fused transformation is as elementwise as its inner one) but keys
  # its state by its own layout, so its state is not the per-leaf one: fuse or flat, not both.
  return [e for e in all_entries()
          if fusion_blocker(e.factory()) is None and not isinstance(e.factory(), steadax.Fused)]


def _run_both(entry, steps=3):
  """``steps`` steps per leaf and on flat parameters, in one jitted program."""
  params = _params()
  flat = steadax.flat_params(params, max_leaf_size=MAX)
  plain, on_flat = entry.factory(), entry.factory()
  step_plain = _harness.make_step(entry, _loss, _harness.matrix_grads)
  step_flat = _harness.make_step(entry, lambda f: _loss(f.tree()), _harness.matrix_grads)

  @jax.jit
  def run(params, flat):
    def body(carry, _):
      (params, state, _), (flat, fstate, _) = carry
      updates, state = step_plain(plain, params, state)
      fupdates, fstate = step_flat(on_flat, flat, fstate)
      return ((steadax.apply_updates(params, updates), state, updates),
              (steadax.apply_updates(flat, fupdates), fstate, fupdates)), None

    # One traced step in a scan (not an unrolled loop): a third of the program to compile.
    zeros = jax.tree_util.tree_map(jnp.zeros_like, (params, flat))
    carry = ((params, plain.init(params), zeros[0]), (flat, on_flat.init(flat), zeros[1]))
    return jax.lax.scan(body, carry, None, length=steps)[0]

  return run(params, flat)


@pytest.mark.x32_only
@pytest.mark.parametrize("entry", _elementwise_entries(), ids=lambda e: e.name)
def test_every_elementwise_registry_entry_gives_the_per_leaf_result(entry):
  (params, state, updates), (flat, fstate, fupdates) = _run_both(entry)
  assert isinstance(flat, steadax.FlatParams)
  expected, got = (params, state, updates), steadax.unflatten_params((flat, fstate, fupdates))
  assert type_signature(got) == type_signature(expected)
  for a, b in zip(jax.tree_util.tree_leaves(expected), jax.tree_util.tree_leaves(got)):
    if not jnp.issubdtype(a.dtype, jnp.inexact):
      np.testing.assert_array_equal(a, b)
      continue
    # The same maths on concatenated leaves, and whole-tree sums (norms, inner products) added in
    # another order: equal to a few units in the last place of the leaf's dtype.
    eps = float(jnp.finfo(a.dtype).eps)
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64),
                               rtol=max(8 * eps, 1e-5), atol=1e-6)


@pytest.mark.parametrize("entry", _elementwise_entries()[::6], ids=lambda e: e.name)
def test_state_types_are_stable_on_flat_params(entry):
  """In both x64 modes (traced abstractly): the state keeps its types, and unflattened it has the
  per-leaf state's."""
  params = _params()
  flat = steadax.flat_params(params, max_leaf_size=MAX)
  tx = entry.factory()
  step = _harness.make_step(entry, lambda f: _loss(f.tree()), _harness.matrix_grads)
  state = jax.eval_shape(tx.init, flat)
  _, new_state = jax.eval_shape(lambda f, s: step(tx, f, s), flat, state)
  assert type_signature(new_state) == type_signature(state)
  unflat = jax.eval_shape(lambda s: steadax.unflatten_params(s), state)
  assert type_signature(unflat) == type_signature(jax.eval_shape(tx.init, params))


def test_state_is_a_few_arrays_and_mirrors_the_parameters():
  params = {f"p{i:03d}": jnp.full((3 + i % 5,), 0.1 * i, jnp.float32) for i in range(50)}
  flat = steadax.flat_params(params, max_same_shape=None)  # 10 leaves a shape: buffered anyway
  tx = steadax.adamw(0.1)
  state = tx.init(flat)
  assert len(jax.tree_util.tree_leaves(state)) == 3  # count, mu, nu
  assert isinstance(state[0].mu, steadax.FlatParams)
  assert state[0].mu.tree()["p007"].shape == (5,)
  grads = jax.grad(lambda f: sum(jnp.sum(x ** 2) for x in f.tree().values()))(flat)
  updates, state = tx.update(grads, state, flat)
  assert len(jax.tree_util.tree_leaves(updates)) == 1


def test_compiled_step_is_a_few_kernels_whatever_the_leaf_count():
  """The point of flat parameters: an AdamW training step over 100 leaves compiles to a handful of
  optimizer kernels (per leaf it is three per leaf plus the apply)."""
  params = {f"p{i:03d}": jnp.full((64,), 0.5, jnp.float32) for i in range(100)}
  tx = steadax.adamw(1e-3)

  def compiled(params):
    def step(params, state):
      grads = jax.tree_util.tree_map(lambda x: x * 0.1, params)
      updates, state = tx.update(grads, state, params)
      return steadax.apply_updates(params, updates), state
    return jax.jit(step, donate_argnums=(0, 1)).lower(params, tx.init(params)).compile().as_text()

  def fusions(text):
    return len(re.findall(r" fusion\(", text[text.index("ENTRY"):]))

  per_leaf, flat = compiled(params), compiled(steadax.flat_params(params, max_same_shape=None))
  assert fusions(per_leaf) >= 300
  assert fusions(flat) <= 10
  # Donated: the buffer, the count and both moments are written in place.
  assert len(re.findall(r"\{\d+\}: \(\d+, \{\}, (may|must)-alias\)", flat)) == 4


@pytest.mark.parametrize("make, piece", [
    (lambda: steadax.adafactor(0.1), "scale_by_factored_rms"),
    # masked and partition take FlatParams (their mask or labels resolved per buffer), not what
    # they wrap: the refusal names the piece inside.
    (lambda: steadax.masked(steadax.scale_by_trust_ratio(), lambda p: jax.tree.map(lambda _: True, p)),
     "scale_by_trust_ratio"),
    (lambda: steadax.contrib.muon(0.1), "scale_by_muon"),
    (lambda: steadax.lbfgs(), "linesearch"),
    (lambda: steadax.lamb(0.1), "scale_by_trust_ratio"),
    (lambda: steadax.MultiSteps(steadax.adafactor(0.1), 2), "scale_by_factored_rms"),
    # A bare function pair is the user's own code (its init is not steadax's); inside a chain it is
    # refused, since steadax cannot see whether it is elementwise.
    (lambda: steadax.chain(steadax.GradientTransformation(lambda p: (), lambda u, s, p=None: (u, s))),
     "function pair"),
])
def test_transformations_that_are_not_elementwise_refuse_flat_params(make, piece):
  flat = steadax.flat_params(_params(), max_leaf_size=MAX)
  with pytest.raises(ValueError, match=f"cannot run on FlatParams: .*({piece})"):
    make().init(flat)


def test_fused_transformations_accept_flat_params():
  flat = steadax.flat_params(_params(), max_leaf_size=MAX)
  state = steadax.fuse(steadax.adam(0.1)).init(flat)
  assert isinstance(state, steadax.FusedState)


def test_pytree_structure_depends_on_the_layout_only():
  flat = steadax.flat_params(_params(), max_leaf_size=MAX)
  falses = jax.tree_util.tree_map(lambda _: False, flat)
  assert jax.tree_util.tree_structure(falses) == jax.tree_util.tree_structure(flat)
  paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(flat)[0]]
  assert paths[:2] == ["['bfloat16']", "['float32']"] and '["[\'w\']"]' in paths
  arrays, rest = eqx.partition(flat, eqx.is_array)
  assert jax.tree_util.tree_structure(eqx.combine(arrays, rest)) == jax.tree_util.tree_structure(flat)
  traces = []

  @jax.jit
  def f(flat):
    traces.append(1)
    return steadax.apply_updates(flat, flat)

  f(flat)
  f(jax.tree_util.tree_map(lambda x: x + 1, flat))
  assert len(traces) == 1


def test_repack_and_bad_input():
  params = _params()
  flat = steadax.flat_params(params, max_leaf_size=MAX)
  moments = jax.tree_util.tree_map(lambda x: jnp.full(x.shape, 2.0, jnp.float32), params)
  packed = flat.repack(moments)
  assert packed.layout == flat.layout and packed["bfloat16"].dtype == jnp.float32
  np.testing.assert_array_equal(packed.tree()["h"]["y"], jnp.full((2, 2), 2.0))
  with pytest.raises(ValueError, match=r"FlatParams.repack: the tree at \['b'\]\[1\] is float32\[4\]"):
    flat.repack({**params, "b": [params["b"][0], jnp.zeros(4, jnp.float32)]})
  with pytest.raises(TypeError, match="buffer 'bfloat16' is bool"):
    jax.tree_util.tree_map(lambda _: False, flat).tree()
  with pytest.raises(ValueError, match="max_leaf_size"):
    steadax.flat_params(params, max_leaf_size=-1)
  with pytest.raises(ValueError, match="already hold a FlatParams"):
    steadax.flat_params({"a": flat})


# -- groups: masks and partitions on flat parameters --------------------------------------------

def _decay(p):
  return jax.tree_util.tree_map(lambda x: x.ndim > 1, p)


def _kinds(p):
  return jax.tree_util.tree_map(lambda x: "matrix" if x.ndim > 1 else "vector", p)


def _grouped_params():
  f32 = jnp.float32  # float32 in both x64 modes: the buffer keys name the dtype
  return {"b1": jnp.linspace(-1.0, 1.0, 3, dtype=f32), "b2": jnp.linspace(0.5, 1.5, 4, dtype=f32),
          "w1": jnp.linspace(-1.0, 1.0, 6, dtype=f32).reshape(2, 3),
          "w2": jnp.linspace(0.0, 1.0, 8, dtype=f32).reshape(2, 4),
          "big": jnp.linspace(-1.0, 1.0, 40, dtype=f32).reshape(5, 8),  # above MAX: kept
          "h": jnp.linspace(-1.0, 1.0, 5, dtype=jnp.bfloat16)}


def _grouped_loss(p):
  w = p["w1"].T @ p["b1"][:2] + jnp.sum(p["w2"]) * p["b1"]
  return (jnp.sum(w ** 2) + jnp.sum(p["b2"] ** 2) + jnp.sum(jnp.sin(p["big"]))
          + jnp.sum(p["h"].astype(jnp.float32) ** 2))


def test_groups_split_the_buffers_by_label_and_dtype():
  flat = steadax.flat_params(_grouped_params(), max_leaf_size=MAX, groups=_decay)
  assert sorted(flat.layout.buffer_keys) == sorted(["False/float32", "True/float32", "['big']", "['h']"])
  np.testing.assert_array_equal(flat["True/float32"], jnp.concatenate(
      [jnp.ravel(_grouped_params()["w1"]), jnp.ravel(_grouped_params()["w2"])]))
  # A prefix tree of labels works as for partition; so does a tree of every leaf's label.
  by_prefix = steadax.flat_params(_grouped_params(), max_leaf_size=MAX,
                                  groups={"b1": "a", "b2": "a", "w1": "b", "w2": "b", "big": "b", "h": "a"})
  assert "a/float32" in by_prefix.layout.buffer_keys and "b/float32" in by_prefix.layout.buffer_keys
  with pytest.raises(TypeError, match=r"flat_params: the group of \['b1'\] is array\(\[1.\]\), which is not hashable"):
    steadax.flat_params({"b1": jnp.ones(2), "b2": jnp.ones(2)}, groups={"b1": np.ones(1), "b2": "a"})
  with pytest.raises(ValueError, match="flat_params: `groups` does not match the parameters"):
    steadax.flat_params(_grouped_params(), groups={"b1": "a"})


@pytest.mark.parametrize("kind", ["adamw_mask", "partition"])
def test_masks_and_partitions_on_grouped_flat_params_match_the_per_leaf_run(kind):
  if kind == "adamw_mask":
    make, groups = lambda: steadax.adamw(0.1, weight_decay=0.5, mask=_decay), _decay
  else:
    make = lambda: steadax.partition(  # noqa: E731
        {"matrix": steadax.adam(0.1), "vector": steadax.sgd(0.2, momentum=0.9)}, _kinds)
    groups = _kinds
  tx = make()
  params = _grouped_params()
  flat = steadax.flat_params(params, max_leaf_size=MAX, groups=groups)

  @jax.jit
  def both(params, flat):
    state, flat_state = tx.init(params), tx.init(flat)
    for _ in range(3):
      updates, state = tx.update(jax.grad(_grouped_loss)(params), state, params)
      flat_updates, flat_state = tx.update(jax.grad(lambda f: _grouped_loss(f.tree()))(flat), flat_state, flat)
      params, flat = steadax.apply_updates(params, updates), steadax.apply_updates(flat, flat_updates)
    return params, flat, state, flat_state

  params, flat, state, flat_state = both(params, flat)
  assert isinstance(flat, steadax.FlatParams)
  for (path, ours), theirs in zip(jax.tree_util.tree_flatten_with_path(flat.tree())[0],
                                  jax.tree_util.tree_leaves(params)):
    np.testing.assert_allclose(np.asarray(ours, np.float32), np.asarray(theirs, np.float32),
                               rtol=1e-6, atol=1e-6, err_msg=str(path))
  unflat = steadax.unflatten_params(flat_state)
  assert jax.tree_util.tree_structure(unflat) == jax.tree_util.tree_structure(state)
  assert [x.dtype for x in jax.tree_util.tree_leaves(unflat)] == [x.dtype for x in jax.tree_util.tree_leaves(state)]


def test_a_mask_that_splits_a_buffer_is_refused_naming_the_leaves():
  flat = steadax.flat_params(_grouped_params(), max_leaf_size=MAX)  # no groups: one float32 buffer
  with pytest.raises(ValueError, match=r"masked: the mask gives False to \['b1'\] and True to "
                                       r"\['w1'\], which share the flat buffer 'float32'.*groups="):
    steadax.adamw(0.1, mask=_decay).init(flat)
  with pytest.raises(ValueError, match="partition: the param_labels gives 'vector' to"):
    steadax.partition({"matrix": steadax.adam(0.1), "vector": steadax.sgd(0.1)}, _kinds).init(flat)
  # A mask that is uniform on every buffer needs no groups.
  steadax.adamw(0.1, mask=lambda p: jax.tree_util.tree_map(lambda _: True, p)).init(flat)


def test_a_mask_over_a_tree_holding_flat_params_below_its_root_is_refused():
  flat = steadax.flat_params(_grouped_params(), max_leaf_size=MAX, groups=_decay)
  with pytest.raises(ValueError, match="masked: the parameters hold a FlatParams below their root"):
    steadax.adamw(0.1, mask=_decay).init({"model": flat})


def test_fuse_still_refuses_masks():
  with pytest.raises(ValueError, match="fuse: cannot fuse masked"):
    steadax.fuse(steadax.adamw(0.1, mask=_decay))
