"""steadax.checkpoint: flat arrays and manifests, validation by path, refactors, Orbax files, format 1."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import zipfile

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

import steadax
from steadax import checkpoint

CheckpointError = checkpoint.CheckpointError
FORMAT_1 = pathlib.Path(__file__).with_name("data") / "format1.steadax"
PARAMS = {"w": jnp.ones((2, 3)), "b": jnp.zeros(3, jnp.bfloat16)}


def _trained(tx, params=PARAMS, steps=2):
  state = tx.init(params)
  for _ in range(steps):
    grads = jax.tree_util.tree_map(lambda p: (p + 0.5).astype(p.dtype), params)
    _, state = tx.update(grads, state, params)
  return state


def _bits(tree):
  def one(x):
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
      x = jax.random.key_data(x)
    x = np.asarray(x)
    return str(x.dtype), x.shape, x.tobytes()
  return jax.tree_util.tree_map(one, tree), jax.tree_util.tree_structure(tree)


def test_every_dtype_round_trips_bit_exactly(tmp_path):
  # Runs in both x64 modes: float64 / int64 leaves appear only with x64 on.
  wide = jnp.float64 if jax.config.jax_enable_x64 else jnp.float32
  state = {
      "f16": jnp.asarray([1.5, -np.inf, np.nan], jnp.float16),
      "bf16": jnp.asarray([3.0, 1e-30], jnp.bfloat16),
      "f32": jnp.asarray([[1.0, 2.0]], jnp.float32),
      "wide": jnp.asarray([np.pi], wide),
      "c64": jnp.asarray([1 + 2j], jnp.complex64),
      "i32": jnp.asarray(7, jnp.int32),
      "u8": jnp.asarray([255, 0], jnp.uint8),
      "bool": jnp.asarray([True, False]),
      "key": jax.random.key(3),
      "empty": jnp.zeros((0, 4)),
  }
  path = checkpoint.save(tmp_path / "all.steadax", state)
  restored = checkpoint.restore(path, jax.eval_shape(lambda: state))
  assert _bits(restored) == _bits(state)
  manifest = checkpoint.read_manifest(path)
  records = {r["path"]: r for r in manifest["leaves"]}
  assert records["key"]["dtype"] == "key<fry>" and records["key"]["key_impl"] == "threefry2x32"
  assert records["wide"]["dtype"] == str(jnp.dtype(wide)) and records["empty"]["shape"] == [0, 4]
  assert not any(jax.tree_util.tree_leaves(jax.tree_util.tree_map(
      lambda x: getattr(x, "weak_type", False), restored)))


@pytest.mark.x32_only
def test_manifest_records_versions_transformation_and_leaves():
  tx = steadax.adamw(1e-3, weight_decay=0.1)
  state = _trained(tx)
  manifest = checkpoint.state_manifest(state, tx, step=2, metadata={"run": "a"})
  json.dumps(manifest)  # serialisable as is
  assert manifest["format"] == "steadax-checkpoint" and manifest["step"] == 2
  assert manifest["steadax_version"] and manifest["jax_version"] == jax.__version__
  assert manifest["transformation"] == checkpoint.describe_transformation(tx)
  assert "ScaleByAdam" in manifest["transformation"] and manifest["metadata"] == {"run": "a"}
  assert [(r["path"], r["shape"], r["dtype"]) for r in manifest["leaves"]] == [
      ("0/count", [], "int32"), ("0/mu/b", [3], "bfloat16"), ("0/mu/w", [2, 3], "float32"),
      ("0/nu/b", [3], "bfloat16"), ("0/nu/w", [2, 3], "float32")]


@pytest.mark.x32_only
def test_errors_name_each_mismatched_path():
  arrays = checkpoint.state_to_arrays(_trained(steadax.adam(1e-3)))
  template = steadax.adam(1e-3).init(PARAMS)
  wrong_shape = dict(arrays, **{"0/mu/w": np.zeros((3, 2), np.float32)})
  with pytest.raises(CheckpointError, match=r"0/mu/w: shape \(3, 2\) in the checkpoint, \(2, 3\) expected"):
    checkpoint.arrays_to_state(wrong_shape, template)
  wrong_dtype = dict(arrays, **{"0/nu/b": np.zeros(3, np.float32)})
  with pytest.raises(CheckpointError, match="0/nu/b: dtype float32 in the checkpoint, bfloat16 expected"):
    checkpoint.arrays_to_state(wrong_dtype, template)
  missing = {k: v for k, v in arrays.items() if k != "0/count"}
  with pytest.raises(CheckpointError, match=r"0/count: missing from the checkpoint \(expected shape \(\), int32\)"):
    checkpoint.arrays_to_state(missing, template)
  extra = dict(arrays, **{"1/trace/w": np.zeros((2, 3), np.float32)})
  with pytest.raises(CheckpointError, match="1/trace/w: in the checkpoint but not in the template"):
    checkpoint.arrays_to_state(extra, template)
  assert _bits(checkpoint.arrays_to_state(extra, template, unused="ignore"))[1] == (
      jax.tree_util.tree_structure(template))
  # Another optimizer's state: every differing path is listed, with what it was written for.
  with pytest.raises(CheckpointError) as error:
    checkpoint.arrays_to_state(checkpoint.state_to_arrays(_trained(steadax.sgd(0.1, momentum=0.9))),
                               template, manifest={"transformation": "Chain(sgd)"})
  for path in ("0/count", "0/mu/w", "0/nu/b", "0/trace/w", "Chain(sgd)"):
    assert path in str(error.value)


@pytest.mark.x32_only
def test_a_state_survives_a_refactor_where_the_paths_allow():
  params = PARAMS
  adam_state = _trained(steadax.adam(1e-3))
  arrays = checkpoint.state_to_arrays(adam_state)
  # adam -> adamw: a stateless weight-decay stage; scale_by_adam's paths do not move.
  restored = checkpoint.arrays_to_state(arrays, jax.eval_shape(steadax.adamw(1e-3).init, params))
  assert _bits(restored[0]) == _bits(adam_state[0])
  # A named_chain gains a stage: the old stages are matched by name, the new one starts fresh.
  old = steadax.named_chain(("clip", steadax.clip(1.0)), ("adam", steadax.adam(1e-3)))
  new = steadax.named_chain(("clip", steadax.clip(1.0)), ("momentum", steadax.trace(0.9)),
                            ("adam", steadax.adam(1e-3)))
  old_state = _trained(old)
  with pytest.raises(CheckpointError, match="momentum/trace/w: missing"):
    checkpoint.arrays_to_state(checkpoint.state_to_arrays(old_state), new.init(params))
  restored = checkpoint.arrays_to_state(checkpoint.state_to_arrays(old_state), new.init(params),
                                        missing="keep")
  assert _bits(restored["adam"]) == _bits(old_state["adam"])
  assert float(jnp.sum(restored["momentum"].trace["w"])) == 0.0
  # missing="keep" needs concrete template leaves to keep.
  with pytest.raises(CheckpointError, match="needs a concrete template leaf"):
    checkpoint.arrays_to_state(checkpoint.state_to_arrays(old_state), jax.eval_shape(new.init, params),
                               missing="keep")


@pytest.mark.x32_only
def test_restore_reads_only_what_the_template_takes(tmp_path):
  # Through the files: a stage added (missing="keep") and a stage removed (unused="ignore"); Orbax
  # reads the paths the template takes and no other.
  params = PARAMS
  old = steadax.named_chain(("clip", steadax.clip(1.0)), ("momentum", steadax.trace(0.9)),
                            ("adam", steadax.adam(1e-3)))
  new = steadax.named_chain(("adam", steadax.adam(1e-3)), ("ema", steadax.ema(0.9)))
  old_state = _trained(old)
  path = checkpoint.save(tmp_path / "c", old_state, tx=old)
  with pytest.raises(CheckpointError) as error:
    checkpoint.restore(path, new.init(params))
  message = str(error.value)
  assert "ema/ema/w: missing" in message and "momentum/trace/b, momentum/trace/w: in the checkpoint" in message
  assert str(path) in message and "written for" in message
  restored = checkpoint.restore(path, new.init(params), missing="keep", unused="ignore")
  assert _bits(restored["adam"]) == _bits(old_state["adam"])
  assert _bits(restored["ema"]) == _bits(new.init(params)["ema"])


@pytest.mark.x32_only
def test_restore_checks_the_transformation_when_given(tmp_path):
  tx = steadax.adam(1e-3)
  path = checkpoint.save(tmp_path / "c", _trained(tx), tx=tx)
  checkpoint.restore(path, tx.init(PARAMS), tx=steadax.adam(1e-3))
  with pytest.raises(CheckpointError, match="written for another transformation"):
    checkpoint.restore(path, tx.init(PARAMS), tx=steadax.adam(2e-3))
  checkpoint.restore(path, tx.init(PARAMS))  # without tx: any template that fits


@pytest.mark.x32_only
def test_incomplete_or_damaged_checkpoints_fail_clearly(tmp_path):
  tx = steadax.adam(1e-3)
  path = checkpoint.save(tmp_path / "c", _trained(tx, params={"w": jnp.ones(512)}), tx=tx)
  template = tx.init({"w": jnp.ones(512)})
  # An Orbax write that never finished (its temporary directory) is not a checkpoint.
  shutil.copytree(path, tmp_path / "5.orbax-checkpoint-tmp-1")
  with pytest.raises(CheckpointError, match="5.orbax-checkpoint-tmp-1 is not a complete steadax checkpoint"):
    checkpoint.restore(tmp_path / "5.orbax-checkpoint-tmp-1", template)
  # Damaged array files: the error names the checkpoint, no half-read state comes back.
  damaged = shutil.copytree(path, tmp_path / "damaged")
  for root, _, names in os.walk(os.path.join(damaged, "arrays")):
    for name in names if os.path.basename(root) == "d" else ():
      data = pathlib.Path(root, name).read_bytes()
      pathlib.Path(root, name).write_bytes(data[: len(data) // 2])
  with pytest.raises(CheckpointError, match="the arrays of .*damaged cannot be read"):
    checkpoint.restore(damaged, template)
  shutil.rmtree(os.path.join(damaged, "manifest"))
  with pytest.raises(CheckpointError, match="damaged is not a complete steadax checkpoint"):
    checkpoint.read_manifest(damaged)
  (tmp_path / "other").write_bytes(b"not a checkpoint")
  with pytest.raises(CheckpointError, match="other is not a complete"):
    checkpoint.read_manifest(tmp_path / "other")
  with pytest.raises(FileNotFoundError, match="no checkpoint at .*absent"):
    checkpoint.restore(tmp_path / "absent", template)
  # A directory of steps given where one checkpoint is expected.
  checkpoint.save_step(tmp_path / "steps", 1, template)
  with pytest.raises(CheckpointError, match="holds the steps of save_step: read one with restore_step"):
    checkpoint.restore(tmp_path / "steps", template)
  # A checkpoint is not replaced unless asked.
  with pytest.raises(CheckpointError, match="exists; pass overwrite=True"):
    checkpoint.save(path, template)
  checkpoint.save(path, template, step=3, overwrite=True)
  assert checkpoint.read_manifest(path)["step"] == 3


def _format_1_state():
  # The recipe that wrote tests/checkpoint/data/format1.steadax with the ZIP format (FORMAT_VERSION
  # 1): adam after two steps (float32 and bfloat16 moments), a PRNG key, an empty array, uint8.
  params = {"w": jnp.arange(6, dtype=jnp.float32).reshape(2, 3), "b": jnp.asarray([1.0, -2.0, 3.0], jnp.bfloat16)}
  tx = steadax.adam(1e-3)
  state = _trained(tx, params)
  return tx, {"opt_state": state, "key": jax.random.key(7), "empty": jnp.zeros((0, 2)),
              "u8": jnp.asarray([1, 255], jnp.uint8)}


@pytest.mark.x32_only
def test_format_1_files_stay_readable(tmp_path):
  tx, state = _format_1_state()
  restored = checkpoint.restore(FORMAT_1, jax.eval_shape(lambda: state), tx=tx)
  assert jax.tree_util.tree_structure(restored) == jax.tree_util.tree_structure(state)
  for path, got in jax.tree_util.tree_flatten_with_path(restored)[0]:
    want = jax.tree_util.tree_flatten_with_path(state)[0]
    want = dict((checkpoint.leaf_path(p), x) for p, x in want)[checkpoint.leaf_path(path)]
    assert got.dtype == want.dtype and got.shape == want.shape
    if jax.dtypes.issubdtype(got.dtype, jax.dtypes.prng_key):
      got, want = jax.random.key_data(got), jax.random.key_data(want)
    # The file holds the moments as adam computed them when it was written, with 1 - b2 formed from
    # float32 0.999; today's adam uses Optax's exact constant (1.3e-5 relative in nu).
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=2e-5)
  manifest = checkpoint.read_manifest(FORMAT_1)
  assert manifest["format_version"] == 1 and manifest["step"] == 2 and manifest["metadata"] == {"run": "fixture"}
  # A directory of format-1 steps: listed beside the Orbax steps, read by restore_step, and the
  # converter is a restore and a save.
  shutil.copy(FORMAT_1, tmp_path / "step_00000002.steadax")
  checkpoint.save_step(tmp_path, 5, state, tx=tx)
  assert checkpoint.all_steps(tmp_path) == [2, 5] and checkpoint.latest_step(tmp_path) == 5
  step, old = checkpoint.restore_step(tmp_path, jax.eval_shape(lambda: state), step=2)
  assert step == 2 and _bits(old) == _bits(restored)
  converted = checkpoint.save(tmp_path / "converted", old, tx=tx, step=2)
  assert _bits(checkpoint.restore(converted, jax.eval_shape(lambda: state))) == _bits(restored)
  # A damaged format-1 file (one flipped bit in an array: zip's CRC-32 catches it) names the file.
  with zipfile.ZipFile(FORMAT_1) as archive:
    info = archive.getinfo("3.bin")
  data = bytearray(FORMAT_1.read_bytes())
  data[info.header_offset + 30 + len(info.filename) + len(info.extra)] ^= 1
  (tmp_path / "flipped.steadax").write_bytes(bytes(data))
  with pytest.raises(CheckpointError, match="flipped.steadax is not a complete steadax checkpoint"):
    checkpoint.restore(tmp_path / "flipped.steadax", jax.eval_shape(lambda: state))


@pytest.mark.x32_only
def test_step_directories(tmp_path):
  tx = steadax.sgd(0.1, momentum=0.9)
  states = [_trained(tx, steps=s) for s in range(4)]
  with pytest.raises(FileNotFoundError, match="no checkpoint"):
    checkpoint.restore_step(tmp_path, tx.init(PARAMS))
  for step, state in enumerate(states):
    checkpoint.save_step(tmp_path, step * 10, state, tx=tx, keep=2)
  # A killed writer's leftover: Orbax's temporary directory of step 40, never renamed.
  shutil.copytree(tmp_path / "30", tmp_path / "40.orbax-checkpoint-tmp-1")
  assert checkpoint.all_steps(tmp_path) == [20, 30] and checkpoint.latest_step(tmp_path) == 30
  # Orbax's own layout: a plain CheckpointManager lists the steps and reads the items.
  with ocp.CheckpointManager(tmp_path) as manager:
    assert list(manager.all_steps()) == [20, 30]
    items = manager.restore(30, args=ocp.args.Composite(manifest=ocp.args.JsonRestore()))
  assert items["manifest"]["step"] == 30 and items["manifest"]["transformation"] == checkpoint.describe_transformation(tx)
  with pytest.raises(CheckpointError, match="step 30 is already saved"):
    checkpoint.save_step(tmp_path, 30, states[0])
  step, restored = checkpoint.restore_step(tmp_path, tx.init(PARAMS))
  assert step == 30 and _bits(restored) == _bits(states[3])
  step, restored = checkpoint.restore_step(tmp_path, tx.init(PARAMS), step=20)
  assert _bits(restored) == _bits(states[2])
  with pytest.raises(FileNotFoundError, match=r"no checkpoint of step 10 .*\[20, 30\]"):
    checkpoint.restore_step(tmp_path, tx.init(PARAMS), step=10)
  with pytest.raises(ValueError, match="keep must be a positive integer"):
    checkpoint.save_step(tmp_path, 40, states[0], keep=0)


@pytest.mark.x32_only
def test_restored_arrays_follow_the_template_sharding(tmp_path):
  # One process, its last device (several processes: test_sharded.py).
  sharding = jax.sharding.SingleDeviceSharding(jax.devices()[-1])
  template = jax.ShapeDtypeStruct((2,), jnp.float32, sharding=sharding)
  restored = checkpoint.arrays_to_state({"<root>": np.ones(2, np.float32)}, template)
  assert restored.sharding == template.sharding and restored.dtype == jnp.float32
  state = {"w": jnp.ones(3), "key": jax.random.key(0)}
  path = checkpoint.save(tmp_path / "c", state)
  template = {"w": jax.ShapeDtypeStruct((3,), jnp.float32, sharding=sharding),
              "key": jax.ShapeDtypeStruct((), state["key"].dtype, sharding=sharding)}
  restored = checkpoint.restore(path, template)
  assert restored["w"].sharding == restored["key"].sharding == sharding


@pytest.mark.x32_only
def test_non_array_leaves_and_path_collisions_are_named():
  with pytest.raises(CheckpointError, match="leaf at a is a str"):
    checkpoint.state_to_arrays({"a": "text"})
  with pytest.raises(CheckpointError, match="path 'a/b'"):
    checkpoint.state_to_arrays({"a/b": jnp.ones(1), "a": {"b": jnp.ones(1)}})
  with pytest.raises(ValueError, match="missing must be 'raise' or 'keep'"):
    checkpoint.arrays_to_state({}, {}, missing="skip")
