"""steadax.experimental.aggregating: against Optax, statistics against numpy, type stability under
jit and lax.scan, dtypes, errors."""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from optax.experimental import aggregating as optax_aggregating

import steadax
from steadax.experimental import aggregating

RNG = np.random.default_rng(0)
PARAMS = {"w": jnp.asarray(RNG.normal(size=(3, 2)), jnp.float32), "b": jnp.zeros(2, jnp.float32)}
BATCH = 4
GRADS = [jax.tree.map(lambda p: jnp.asarray(RNG.normal(size=(BATCH,) + p.shape), jnp.float32), PARAMS)
         for _ in range(6)]


@contextlib.contextmanager
def optax_rules():
  with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"), jax.enable_x64(False):
    yield


def run(opt, grads=GRADS, params=PARAMS):
  state = opt.init(params)
  outputs = []
  for g in grads:
    updates, state = opt.update(g, state, params)
    outputs.append(updates)
  return outputs, state


def assert_trees_close(ours, theirs, tol=1e-6):
  flat_ours = jax.tree_util.tree_flatten_with_path(ours)[0]
  flat_theirs = dict(jax.tree_util.tree_flatten_with_path(theirs)[0])
  assert [p for p, _ in flat_ours] == list(flat_theirs)
  for path, a in flat_ours:
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(flat_theirs[path], np.float64),
                               rtol=tol, atol=tol, err_msg=jax.tree_util.keystr(path))


def field_names(state):
  """The state's NamedTuple field names, in tree order (records of both libraries compared by name)."""
  names = []
  for path, _ in jax.tree_util.tree_flatten_with_path(state)[0]:
    names.append(jax.tree_util.keystr(path))
  return names


def test_every_optax_name_exists():
  theirs = {n for n in dir(optax_aggregating) if not n.startswith("_")}
  imports = {"Any", "NamedTuple", "Protocol", "Sequence", "base", "jax", "jnp", "math", "tree", "utils"}
  assert theirs - imports <= set(aggregating.__all__)
  assert steadax.experimental.aggregating is aggregating


@pytest.mark.parametrize("accumulation_steps", [1, 3])
def test_add_mean_variance_to_opt_agrees_with_optax(accumulation_steps):
  ours_opt = aggregating.add_mean_variance_to_opt(steadax.adam(0.1), 0.9, 0, accumulation_steps)
  assert isinstance(ours_opt, aggregating.Aggregator)
  ours, ours_state = run(ours_opt)
  with optax_rules():
    theirs, theirs_state = run(optax_aggregating.add_mean_variance_to_opt(optax.adam(0.1), 0.9, 0, accumulation_steps))
    theirs_stats = optax_aggregating.get_unbiased_mean_and_variance_ema(theirs_state)
  assert_trees_close(ours, theirs)
  assert field_names(ours_state) == field_names(theirs_state)
  assert_trees_close(aggregating.get_unbiased_mean_and_variance_ema(ours_state), theirs_stats, 1e-5)


def test_process_with_incremental_averaging_agrees_with_optax():
  for axis in (0, None):
    grads = GRADS if axis == 0 else [jax.tree.map(lambda g: g[0], g) for g in GRADS]
    ours = run(aggregating.process(steadax.identity(), aggregating.average_incrementally_updates(axis, 2),
                                   steadax.sgd(0.1, momentum=0.9)), grads)
    with optax_rules():
      theirs = run(optax_aggregating.process(
          optax.identity(), optax_aggregating.average_incrementally_updates(axis, 2),
          optax.sgd(0.1, momentum=0.9)), grads)
    assert_trees_close(ours[0], theirs[0])
    assert field_names(ours[1]) == field_names(theirs[1])


def test_per_example_clipping_then_averaging():
  # Optax's documented use: clip each example's gradient, average, then run an optimizer.
  clip = jax.vmap(steadax.projections.projection_l2_ball, in_axes=(0, None))
  opt = aggregating.process(
      steadax.stateless(lambda grads, params: clip(grads, 1.0)),
      aggregating.Aggregator(init=steadax.init_empty_state,
                             update=lambda g, s, p=None: (jax.tree.map(lambda x: x.mean(0), g), s)),
      steadax.sgd(1.0),
  )
  assert isinstance(opt, aggregating.Aggregator)
  updates, _ = run(opt, GRADS[:1])
  clipped = clip(GRADS[0], 1.0)
  norms = jnp.sqrt(sum(jnp.sum(x.reshape(BATCH, -1) ** 2, axis=1) for x in jax.tree.leaves(clipped)))
  assert np.all(np.asarray(norms) <= 1.0 + 1e-5)
  assert_trees_close(updates[0], jax.tree.map(lambda x: -x.mean(0), clipped))


def test_accumulated_statistics_equal_the_full_batch_statistics():
  # Merging three micro-batches of 4 gives the mean and the unbiased variance of the 12 examples.
  opt = aggregating.add_mean_variance_to_opt(steadax.sgd(0.0), ema_decay=0.0, accumulation_steps=3)
  _, state = run(opt, GRADS[:3])
  mean, variance = aggregating.get_unbiased_mean_and_variance_ema(state)
  stacked = jax.tree.map(lambda *g: np.concatenate([np.asarray(x, np.float64) for x in g]), *GRADS[:3])
  assert_trees_close(mean, jax.tree.map(lambda x: x.mean(0), stacked), 1e-5)
  assert_trees_close(variance, jax.tree.map(lambda x: x.var(0, ddof=1), stacked), 1e-5)


def test_updates_only_on_emitting_steps_and_ready_flag():
  opt = aggregating.process(steadax.identity(), aggregating.average_incrementally_updates(0, 3), steadax.sgd(1.0))
  outputs, state = run(opt)
  for i, updates in enumerate(outputs):
    emitting = i % 3 == 2
    norm = float(steadax.tree.norm(updates))
    assert (norm > 0) == emitting, (i, norm)
  assert bool(steadax.tree.get(state, "ready"))


def test_jit_and_scan_keep_the_state_types():
  opt = aggregating.add_mean_variance_to_opt(steadax.adam(0.1), accumulation_steps=2)
  stacked = jax.tree.map(lambda *g: jnp.stack(g), *GRADS)

  def body(state, g):
    updates, state = opt.update(g, state, PARAMS)
    return state, updates

  final, updates = jax.jit(lambda s: jax.lax.scan(body, s, stacked))(opt.init(PARAMS))
  _, eager_state = run(opt)
  assert jax.tree_util.tree_structure(final) == jax.tree_util.tree_structure(eager_state)
  assert_trees_close(final, eager_state, 1e-5)
  assert jax.tree.leaves(final)[0].dtype == jnp.int32  # the micro-step counter


def test_low_precision_parameters():
  params = jax.tree.map(lambda p: p.astype(jnp.bfloat16), PARAMS)
  grads = [jax.tree.map(lambda g: g.astype(jnp.bfloat16), g) for g in GRADS[:2]]
  opt = aggregating.add_mean_variance_to_opt(steadax.sgd(0.1), accumulation_steps=2)
  outputs, state = run(opt, grads, params)
  assert all(u.dtype == jnp.bfloat16 for u in jax.tree.leaves(outputs))
  mean, variance = aggregating.get_unbiased_mean_and_variance_ema(state)
  assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves((mean, variance)))
  stacked = jax.tree.map(lambda *g: np.concatenate([np.asarray(x, np.float32) for x in g]), *grads)
  assert_trees_close(variance, jax.tree.map(lambda x: x.var(0, ddof=1), stacked), 3e-2)


def test_float16_sum_of_squares_saturates_instead_of_overflowing():
  # The deviations of (6e4, -6e4) are 6e4: their sum of squares (7.2e9, exact in float32) passes
  # float16's range; written as infinity the tracked variance would stay infinite.
  opt = aggregating.add_mean_variance_to_opt(steadax.sgd(0.1))
  params = jnp.zeros(2, jnp.float16)
  grads = jnp.asarray([[6e4, 1.0], [-6e4, 3.0]], jnp.float16)
  aggregator = aggregating.get_per_element_mean_and_sum_sq_diff_grads()
  (_, aux), _ = aggregator.update(grads, aggregator.init(params))
  largest = float(jnp.finfo(jnp.float16).max)
  np.testing.assert_array_equal(np.asarray(aux["sum_sq_diff_grads"], np.float32), [largest, 2.0])
  _, state = opt.update(grads, opt.init(params), params)
  _, variance = aggregating.get_unbiased_mean_and_variance_ema(state)
  np.testing.assert_allclose(np.asarray(variance, np.float32), [largest, 2.0], rtol=1e-3)


def test_aggregator_construction():
  agg = aggregating.Aggregator(steadax.init_empty_state, lambda u, s, p=None: (u, s))
  assert isinstance(agg, aggregating.Aggregator) and isinstance(agg, steadax.GradientTransformationExtraArgs)
  plain = aggregating.process(steadax.identity(), aggregating.accumulate_avg_updates(2), steadax.sgd(1.0))
  assert not isinstance(plain, aggregating.Aggregator)
  assert isinstance(aggregating.average_per_element_updates(), aggregating.Aggregator)
  assert isinstance(aggregating.accumulate_avg_updates(1), type(steadax.identity()))
  assert aggregating.get_batch_size_from_per_elt_updates(GRADS[0], 0) == BATCH
  assert aggregating.get_batch_size_from_per_elt_updates({"w": GRADS[0]["w"]}, [0, 1]) == BATCH * 3


@pytest.mark.parametrize("call, error, match", [
    (lambda: aggregating.accumulate_avg_updates(0), ValueError, "accumulate_avg_updates: `accumulation_steps` must be at least 1"),
    (lambda: aggregating.average_incrementally_updates(0, 1.5), TypeError, "average_incrementally_updates: `accumulation_steps` must be a Python int"),
    (lambda: aggregating.average_per_element_updates("x"), TypeError, "average_per_element_updates: `per_elt_axis`"),
    (lambda: aggregating.get_batch_size_from_per_elt_updates({"a": jnp.ones((2, 1)), "b": jnp.ones((3, 1))}, 0),
     ValueError, "get_batch_size_from_per_elt_updates: per-element updates must share one batch size"),
    (lambda: aggregating.get_batch_size_from_per_elt_updates({"a": jnp.ones(2)}, 3), ValueError,
     r"get_batch_size_from_per_elt_updates: update at \['a'\] has shape \(2,\)"),
    (lambda: aggregating.track_per_element_mean_and_variance_with_ema().update(PARAMS, aggregating.track_per_element_mean_and_variance_with_ema().init(PARAMS)),
     TypeError, "track_per_element_mean_and_variance_with_ema: update needs the extra arguments"),
    (lambda: aggregating.track_per_element_mean_and_variance_with_ema(1.5), ValueError, "ema_decay must lie in"),
    (lambda: aggregating.get_unbiased_mean_and_variance_ema(steadax.sgd(0.1).init(PARAMS)), ValueError,
     "get_unbiased_mean_and_variance_ema: `state` holds no PerElementMeanAndVarianceEMAState"),
    (lambda: aggregating.Aggregator(init=None, update=lambda u, s, p=None: (u, s)), TypeError, "Aggregator: `init` must be a callable"),
])
def test_bad_arguments(call, error, match):
  with pytest.raises(error, match=match):
    call()


def _drifting_count(per_elt, state, params=None):
  """An aggregator written as a function pair whose count drifts from int32 to float32."""
  del params
  return jax.tree.map(lambda x: x.mean(0), per_elt), jnp.asarray(state, jnp.float32)


def test_function_pair_aggregators_go_through_the_contract():
  # Issue 8: Aggregator(init, update) used to return whatever its functions returned; it is now
  # checked like every GradientTransformation pair (strict mode raises on drift, names the pair).
  agg = aggregating.Aggregator(lambda p: jnp.zeros([], jnp.int32), _drifting_count)
  state = agg.init(PARAMS)
  with pytest.raises(steadax.ContractError, match=r"Aggregator\(_drifting_count\): state leaf"):
    agg.update(GRADS[0], state, PARAMS)
  weak = aggregating.Aggregator(lambda p: 0.0, lambda u, s, p=None: (u, s))
  with pytest.raises(steadax.ContractError, match=r"Aggregator\(.*<lambda>\): init produced a weakly typed"):
    weak.init(PARAMS)


def test_incremental_averaging_is_core_chain():
  # One chain implementation: average_incrementally_updates is core's Chain, with its checks.
  from steadax._core._combine import Chain

  agg = aggregating.average_incrementally_updates(0, 2)
  assert isinstance(agg, Chain) and isinstance(agg, aggregating.Aggregator)
  with pytest.raises(ValueError, match="the state holds 1 entries for 2 transformations"):
    agg.update(GRADS[0], agg.init(PARAMS)[:1], PARAMS)
