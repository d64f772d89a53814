"""steadax.checkpoint.restore_state: a state restored into a chain whose named stages changed.

The old chain is ``named_chain(("clip", ...), ("adam", ...), ("lr", ...))`` trained two steps; the
new one inserts, removes, renames or changes a stage. Each stage is restored whole or not at all,
from each form a state is saved in (the state itself, path-keyed arrays, a steadax checkpoint, a
pytree Orbax wrote itself), through wrappers (MultiSteps), nested named_chains and nnx.Optimizer.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

import steadax
from steadax import checkpoint

PARAMS = {"w": jnp.ones((2, 3), jnp.float32), "b": jnp.zeros(3, jnp.float32)}
CLIP, LR = ("clip", steadax.clip_by_global_norm(1.0)), ("lr", steadax.scale(-1e-2))
OLD = steadax.named_chain(CLIP, ("adam", steadax.scale_by_adam()), LR)


def _trained(tx, params=PARAMS, steps=2):
  state = tx.init(params)
  for i in range(steps):
    grads = jax.tree_util.tree_map(lambda p: p + np.float32(0.5 * (i + 1)), params)
    _, state = tx.update(grads, state, params)
  return state


def _same(a, b):
  def bits(x):
    x = jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x
    return str(x.dtype), np.asarray(x).tobytes()
  return (jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
          and jax.tree_util.tree_map(bits, a) == jax.tree_util.tree_map(bits, b))


@pytest.fixture(scope="module")
def saved():
  return _trained(OLD)


def test_a_stage_inserted_in_the_middle_starts_fresh_and_the_others_are_carried(saved):
  new = steadax.named_chain(CLIP, ("clip_updates", steadax.clip(0.5)), ("adam", steadax.scale_by_adam()),
                            ("noise", steadax.add_noise(0.01, 0.55, key=jax.random.key(3))), LR)
  fresh = new.init(PARAMS)
  state, report = checkpoint.restore_state(saved, fresh, new)
  assert report == checkpoint.StageReport(carried=("adam",), new=("noise",),
                                          stateless=("clip", "clip_updates", "lr"))
  assert _same(state["adam"], saved["adam"]) and not _same(state["adam"], fresh["adam"])
  assert _same(state["noise"], fresh["noise"])
  assert str(report).splitlines()[:3] == ["carried: adam", "new (fresh state): noise", "dropped: -"]
  new.update(PARAMS, state, PARAMS)  # the restored state is the new chain's


def test_a_removed_stage_is_dropped_and_a_renamed_one_carried_on_request():
  old = steadax.named_chain(CLIP, ("adam", steadax.scale_by_adam()), ("ema", steadax.ema(0.9)), LR)
  saved = _trained(old)
  fewer = steadax.named_chain(CLIP, ("adam", steadax.scale_by_adam()), LR)
  state, report = checkpoint.restore_state(saved, fewer.init(PARAMS), fewer)
  assert (report.carried, report.new, report.dropped) == (("adam",), (), ("ema",))
  assert _same(state["adam"], saved["adam"])

  renamed = steadax.named_chain(CLIP, ("opt", steadax.scale_by_adam()), ("ema", steadax.ema(0.9)), LR)
  state, report = checkpoint.restore_state(saved, renamed.init(PARAMS), renamed)
  assert (report.carried, report.new, report.dropped) == (("ema",), ("opt",), ("adam",))
  assert "renames={'adam': 'opt'}" in str(report)  # the report says how to carry it
  state, report = checkpoint.restore_state(saved, renamed.init(PARAMS), renamed, renames={"adam": "opt"})
  assert (report.carried, report.new, report.dropped) == (("opt", "ema"), (), ())
  assert report.renamed == {"adam": "opt"} and "opt (was adam)" in str(report)
  assert _same(state["opt"], saved["adam"]) and _same(state["ema"], saved["ema"])
  with pytest.raises(ValueError, match="'nadam', which is not a stage"):
    checkpoint.restore_state(saved, renamed.init(PARAMS), renamed, renames={"adam": "nadam"})


@pytest.mark.parametrize("changed, expected", [
    (steadax.scale_by_adam(mu_dtype=jnp.bfloat16),
     "adam: adam/mu/b: dtype float32 in the checkpoint, bfloat16 expected; adam/mu/w: dtype float32"),
    (steadax.trace(0.9), "adam: adam/trace/b not in the checkpoint; adam/trace/w not in the checkpoint; "
                         "adam/count in the checkpoint only"),
], ids=["dtype", "structure"])
def test_a_stage_whose_state_changed_is_refused_or_started_fresh_never_half_restored(saved, changed, expected):
  new = steadax.named_chain(CLIP, ("adam", changed), ("noise", steadax.add_noise(0.01, 0.55, key=jax.random.key(3))), LR)
  fresh = new.init(PARAMS)
  with pytest.raises(checkpoint.CheckpointError, match="mismatched=\"fresh\"") as error:
    checkpoint.restore_state(saved, fresh, new)
  assert expected in str(error.value)
  state, report = checkpoint.restore_state(saved, fresh, new, mismatched="fresh")
  assert list(report.mismatched) == ["adam"] and report.new == ("noise",) and report.carried == ()
  assert _same(state, fresh)  # all of the mismatched stage is fresh: the matching count is not kept


def test_every_saved_form_restores_the_same_state(saved, tmp_path):
  # The old state with a PRNG key stage, saved four ways; the new chain inserts ema.
  old = steadax.named_chain(CLIP, ("adam", steadax.scale_by_adam()),
                            ("noise", steadax.add_noise(0.01, 0.55, key=jax.random.key(3))), LR)
  state = _trained(old)
  new = steadax.named_chain(CLIP, ("ema", steadax.ema(0.9)), ("adam", steadax.scale_by_adam()),
                            ("noise", steadax.add_noise(0.01, 0.55, key=jax.random.key(3))), LR)
  fresh = new.init(PARAMS)
  directory = checkpoint.save(tmp_path / "steadax", state, tx=old)
  orbax_dir = str(tmp_path / "orbax")
  with ocp.StandardCheckpointer() as checkpointer:
    checkpointer.save(orbax_dir, state)
    checkpointer.wait_until_finished()
  forms = {
      "state": state,
      "arrays": checkpoint.state_to_arrays(state),  # the key as raw uint32 data, no manifest
      "steadax checkpoint": directory,
      "orbax pytree": orbax_dir,
  }
  for form, saved_form in forms.items():
    restored, report = checkpoint.restore_state(saved_form, fresh, new)
    assert (report.carried, report.new) == (("adam", "noise"), ("ema",)), form
    assert _same(restored["adam"], state["adam"]) and _same(restored["noise"], state["noise"]), form
    assert _same(restored["ema"], fresh["ema"]), form
  # From the steadax checkpoint only the arrays of carried stages are read, into the template's
  # types: an abstract template works when no stage is new.
  restored, report = checkpoint.restore_state(directory, jax.eval_shape(old.init, PARAMS), old)
  assert report.carried == ("adam", "noise") and _same(restored, state)
  with pytest.raises(checkpoint.CheckpointError, match="stage 'ema' is new.*jax.eval_shape"):
    checkpoint.restore_state(directory, jax.eval_shape(new.init, PARAMS), new)


def test_stages_inside_wrappers_and_nested_chains(saved):
  # MultiSteps keeps the chain's state in inner_opt_state; a stage may itself be a named_chain.
  inner_old = steadax.named_chain(("adam", steadax.scale_by_adam()), ("ema", steadax.ema(0.5)))
  old = steadax.MultiSteps(steadax.named_chain(CLIP, ("opt", inner_old), LR), every_k_schedule=2)
  state = _trained(old, steps=3)
  inner_new = steadax.named_chain(("adam", steadax.scale_by_adam()), ("trace", steadax.trace(0.9)))
  new = steadax.MultiSteps(steadax.named_chain(CLIP, ("opt", inner_new), LR), every_k_schedule=2)
  restored, report = checkpoint.restore_state(state, new.init(PARAMS), new)
  assert report.carried == ("inner_opt_state/opt/adam",)
  assert (report.new, report.dropped) == (("inner_opt_state/opt/trace",), ("inner_opt_state/opt/ema",))
  assert _same(restored.inner_opt_state["opt"]["adam"], state.inner_opt_state["opt"]["adam"])
  assert _same(restored.mini_step, state.mini_step) and _same(restored.acc_grads, state.acc_grads)

  # Outside the stages (MultiSteps' own fields) the state must match exactly.
  wrapped = steadax.MultiSteps(OLD, every_k_schedule=2)
  with pytest.raises(checkpoint.CheckpointError, match="outside the named_chain stages(.|\n)*mini_step"):
    checkpoint.restore_state(saved, wrapped.init(PARAMS), wrapped)
  # A checkpoint none of whose stages is the template's is refused, not restored as all new.
  with pytest.raises(checkpoint.CheckpointError, match="no stage of the checkpoint is carried"):
    checkpoint.restore_state(state, OLD.init(PARAMS), OLD)
  # Stages are the named_chains of the transformation given: without one, matching is strict.
  grown = steadax.named_chain(CLIP, ("adam", steadax.scale_by_adam()), ("ema", steadax.ema(0.9)), LR)
  with pytest.raises(checkpoint.CheckpointError, match="outside the named_chain stages(.|\n)*  ema/ema/b"):
    checkpoint.restore_state(saved, grown.init(PARAMS), steadax.sgd(0.1))


def test_nnx_optimizer_gains_a_stage():
  nnx = pytest.importorskip("flax.nnx")

  def optimizer(tx):
    model = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
    return model, nnx.Optimizer(model, tx, wrt=nnx.Param)

  model, old = optimizer(OLD)
  grads = nnx.grad(lambda m: jnp.sum(m(jnp.ones((1, 3), jnp.float32)) ** 2))(model)
  old.update(model, grads)
  saved = nnx.to_pure_dict(nnx.state(old))  # what an Orbax checkpoint of the optimizer holds

  new_tx = steadax.named_chain(CLIP, ("adam", steadax.scale_by_adam()), ("ema", steadax.ema(0.9)), LR)
  _, new = optimizer(new_tx)
  state, report = checkpoint.restore_state(saved, nnx.to_pure_dict(nnx.state(new)), new_tx)
  assert report.carried == ("opt_state/adam",) and report.new == ("opt_state/ema",)
  assert report.stateless == ("opt_state/clip", "opt_state/lr")  # NNX's pure dict leaves them out
  target = nnx.state(new)
  nnx.replace_by_pure_dict(target, state)
  nnx.update(new, target)
  assert _same(jax.tree_util.tree_map(lambda v: v[...], new.opt_state["adam"].mu),
               jax.tree_util.tree_map(lambda v: v[...], old.opt_state["adam"].mu))
  assert int(new.step[...]) == 1


@pytest.mark.x32_only
def test_a_file_of_the_previous_format_is_read_too():
  # No named_chain in it: every path must match, as restore's.
  from tests.checkpoint.test_checkpoint import FORMAT_1, _bits, _format_1_state

  tx, state = _format_1_state()
  template = jax.eval_shape(lambda: state)
  restored, report = checkpoint.restore_state(FORMAT_1, template, tx)
  assert report == checkpoint.StageReport()
  assert _bits(restored) == _bits(checkpoint.restore(FORMAT_1, template))


def test_bad_arguments_are_named(saved):
  with pytest.raises(ValueError, match="mismatched must be 'raise' or 'fresh'"):
    checkpoint.restore_state(saved, OLD.init(PARAMS), OLD, mismatched="keep")
  swapped = steadax.named_chain(CLIP, ("adam", steadax.scale_by_adam()), ("opt", steadax.scale_by_adam()), LR)
  with pytest.raises(ValueError, match="two of the checkpoint's arrays the path 'adam/count'"):
    checkpoint.restore_state({**saved, "opt": saved["adam"]}, swapped.init(PARAMS), swapped,
                             renames={"opt": "adam"})
  with pytest.raises(checkpoint.CheckpointError, match="template leaf at adam/count is a str"):
    checkpoint.restore_state(saved, {**OLD.init(PARAMS), "adam": {"count": "zero"}}, OLD)
