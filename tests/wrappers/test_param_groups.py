"""groups with regular expressions and per-group multipliers of a base optimizer (issue 34 §6)."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import steadax

SCHEDULE = steadax.cosine_decay_schedule(0.1, 10)


def _params():
  return {
      "embed": {"table": jnp.array([[0.5, -1.0], [0.2, 0.3]], jnp.float32)},
      "layers": [{"w": jnp.array([0.4, 0.1, -0.6], jnp.float32), "bias": jnp.array([0.3, 0.0], jnp.float32)},
                 {"w": jnp.array([1.0, -0.2, 0.7], jnp.float32), "bias": jnp.array([-0.1, 0.2], jnp.float32)}],
      "final_norm": {"scale": jnp.array([1.0, 0.5], jnp.float32)},
  }


def _grads(i):
  rng = np.random.default_rng(i)
  return jax.tree_util.tree_map(lambda p: jnp.asarray(rng.normal(size=p.shape), p.dtype), _params())


def test_regex_keys_fullmatch_beside_globs():
  keys = ["re:layers\\.\\d+\\.bias|.*norm.*", "embed.*", "re:layers\\.[01]\\..*", "*"]
  labels = steadax.group_labels(keys, _params())
  assert labels["layers"][0]["bias"] == labels["final_norm"]["scale"] == keys[0]
  assert labels["embed"]["table"] == "embed.*"
  assert labels["layers"][1]["w"] == keys[2]
  # fullmatch: "re:bias" does not match "layers.0.bias" (it would with re.search).
  assert steadax.group_labels(["re:bias", "*"], _params())["layers"][0]["bias"] == "*"
  # Inline flags work inside the expression.
  assert steadax.group_labels(["re:(?i)EMBED\\..*", "*"], _params())["embed"]["table"] == "re:(?i)EMBED\\..*"


def test_regex_key_errors():
  with pytest.raises(ValueError, match=r"regular expression 're:\(unclosed' does not compile"):
    steadax.groups({"re:(unclosed": steadax.sgd(0.1)})
  with pytest.raises(TypeError, match=r'as the key "re:.\*bias"'):
    steadax.groups({re.compile(".*bias"): steadax.sgd(0.1)})  # pyright: ignore[reportArgumentType]
  tx = steadax.groups({"re:embed\\..*": steadax.sgd(0.1)})
  with pytest.raises(ValueError, match="'final_norm.scale'.*matches no group"):
    tx.init(_params())


def _multiplied(base_factory):
  """groups with multipliers, and the partition a user would write by hand for the same groups."""
  keys = ["re:.*bias|.*norm.*", "embed.*", "*"]
  base = base_factory(1.0, 1.0)
  tx = steadax.groups({keys[0]: {"wd_mult": 0.0}, keys[1]: {"lr_mult": 4.0, "wd_mult": 0.5}, keys[2]: {}},
                      base)
  ref = steadax.groups({keys[0]: base_factory(1.0, 0.0), keys[1]: base_factory(4.0, 0.5), keys[2]: base})
  return tx, ref, base


BASES = {
    "numbers": lambda lm, wm: steadax.adamw(0.01 * lm, weight_decay=0.1 * wm),
    "schedules": lambda lm, wm: steadax.adamw(lambda c: SCHEDULE(c) * lm, weight_decay=0.1 * wm),
    "clip_masked_decay": lambda lm, wm: steadax.chain(
        steadax.clip_by_global_norm(1.0),
        steadax.adamw(0.01 * lm, weight_decay=0.2 * wm,
                      mask=lambda p: jax.tree_util.tree_map(lambda x: x.ndim > 1, p))),
    "lion": lambda lm, wm: steadax.lion(0.01 * lm, weight_decay=0.2 * wm),
}


@pytest.mark.parametrize("name", sorted(BASES))
def test_multipliers_equal_the_hand_written_groups(name):
  tx, ref, base = _multiplied(BASES[name])
  params = _params()
  s1, s2 = tx.init(params), ref.init(params)
  assert jax.tree_util.tree_structure(s1) == jax.tree_util.tree_structure(s2)
  step = jax.jit(lambda a, b, g: (tx.update(g, a, params), ref.update(g, b, params)))
  for i in range(4):
    (u1, s1), (u2, s2) = step(s1, s2, _grads(i))
    jax.tree_util.tree_map(np.testing.assert_array_equal, u1, u2)
  # Multipliers of 1 leave the base itself: the catch-all group holds the base.
  assert tx.transforms[2] is base


def test_multipliers_under_inject_hyperparams_keep_one_shared_value():
  base = steadax.inject_hyperparams(steadax.adamw)(learning_rate=SCHEDULE, weight_decay=0.1)
  tx = steadax.groups({"embed.*": {"lr_mult": 4.0, "wd_mult": 0.5}, "*": {}}, base)
  params = _params()
  state = tx.init(params)
  hp = state.inner_states["embed.*"].inner_state.hyperparams
  assert float(hp["weight_decay"]) == np.float32(0.1)  # the shared base value stays in the state
  g = _grads(0)
  updates, state = tx.update(g, state, params)
  # The group's optimizer got 4 * lr and 0.5 * wd: the same as the injected adamw built with those
  # values (injected hyperparameters are float32 leaves: b2's 1 - b2 rounds as in Optax's
  # inject_hyperparams, not as the plain adamw's exact constant).
  want = steadax.inject_hyperparams(steadax.adamw)(learning_rate=4.0 * SCHEDULE(0), weight_decay=0.05)
  expected, _ = want.update(g["embed"], want.init(params["embed"]), params["embed"])
  np.testing.assert_allclose(updates["embed"]["table"], expected["table"], rtol=1e-6)
  with pytest.raises(ValueError, match=r"\['wd_mult'\] multiplies .*\['weight_decay'\]"):
    steadax.groups({"*": {"wd_mult": 0.5}}, steadax.inject_hyperparams(steadax.sgd)(learning_rate=0.1))
  # Overwriting the injected value moves every group and keeps their ratio.
  tx3 = steadax.groups({"embed.*": {"lr_mult": 2.0}, "*": {}},
                       steadax.inject_hyperparams(steadax.sgd)(learning_rate=0.1))
  state = steadax.state_set(tx3.init(params), "learning_rate", 0.5)
  updates, state = tx3.update(g, state, params)
  np.testing.assert_allclose(updates["embed"]["table"], -1.0 * g["embed"]["table"], rtol=1e-6)
  np.testing.assert_allclose(updates["layers"][0]["w"], -0.5 * g["layers"][0]["w"], rtol=1e-6)


def test_group_state_is_the_partition_state_optax_makes():
  tx = steadax.groups({"embed.*": {"lr_mult": 10.0}, "*": {}}, steadax.adam(1e-3))
  params = _params()
  labels = steadax.group_labels(tx, params)
  theirs = optax.partition({"embed.*": optax.adam(1e-2), "*": optax.adam(1e-3)}, labels)
  with jax.numpy_dtype_promotion("standard"):
    their_state = theirs.init(params)
  ours = tx.init(params)
  assert [type(x).__name__ for x in jax.tree_util.tree_leaves(ours, is_leaf=lambda x: isinstance(x, tuple))] \
      == [type(x).__name__ for x in jax.tree_util.tree_leaves(their_state, is_leaf=lambda x: isinstance(x, tuple))]
  g = _grads(1)
  u1, _ = tx.update(g, ours, params)
  with jax.numpy_dtype_promotion("standard"):
    u2, _ = theirs.update(g, their_state, params)
  jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4), u1, u2)


def test_multiplier_errors():
  base = steadax.adamw(1e-3)
  with pytest.raises(TypeError, match="need a base optimizer"):
    steadax.groups({"*": {"lr_mult": 2.0}})
  with pytest.raises(ValueError, match=r"unknown group settings \['lr'\]"):
    steadax.groups({"*": {"lr": 2.0}}, base)
  with pytest.raises(ValueError, match="lr_mult must be finite and >= 0"):
    steadax.groups({"*": {"lr_mult": -1.0}}, base)
  with pytest.raises(ValueError, match=r"\['wd_mult'\] multiplies the base optimizer's \['weight_decay'\]"):
    steadax.groups({"*": {"wd_mult": 0.0}}, steadax.adam(1e-3))
  with pytest.raises(ValueError, match="not inside foreign"):
    steadax.groups({"*": {"lr_mult": 2.0}}, optax.adam(1e-3))
