"""Shape groups of the matrix optimizers (issue 22 §1): parameters of one shape, dtype and layout run
as one batched computation, with the per-parameter path's results and state.

The per-parameter path is the same code with grouping off (``MatrixExecution(grouping=False)``, the
optimizers' ``execution`` argument): every parameter a group of its own, as before shape groups
existed. One jitted program per path runs every optimizer on a tree of two small layers with
repeated shapes (and a bfloat16 leaf, which must not be stacked with its float32 twin).
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax
from steadax import MatrixExecution
from steadax.transforms import _runner

X64 = bool(jax.config.jax_enable_x64)
DTYPE = jnp.float64 if X64 else jnp.float32

OPTIMIZERS = {
    "muon": lambda execution=MatrixExecution(): steadax.contrib.muon(0.02, adaptive=True, execution=execution),
    "soap": lambda execution=MatrixExecution(): steadax.soap(0.02, precondition_frequency=1, execution=execution),
    "shampoo": lambda execution=MatrixExecution(): steadax.shampoo(0.02, block_size=4, precondition_frequency=1,
                                                                    execution=execution),
    "psgd_kron": lambda execution=MatrixExecution(): steadax.psgd_kron(0.02, execution=execution),
    "galore": lambda execution=MatrixExecution(): steadax.contrib.galore(0.02, rank=2, update_proj_gap=1,
                                                                         execution=execution),
}
# Whole groups (what an accelerator runs), and every parameter alone.
WHOLE, ALONE = MatrixExecution(chunks=None), MatrixExecution(grouping=False, chunks=None)
# The primitive each one runs per group: its count does not grow with depth.
SIGNATURE = {"muon": "dot_general", "soap": "eigh", "shampoo": "eigh", "psgd_kron": "triangular_solve",
             "galore": "svd"}


def layers(depth: int) -> dict:
  rng = np.random.default_rng(0)
  shapes = {"q": (4, 4), "k": (4, 4), "up": (4, 6), "down": (6, 4), "bias": (4,)}
  tree = {f"layer{i}": {name: jnp.asarray(rng.normal(size=shape), DTYPE) for name, shape in shapes.items()}
          for i in range(depth)}
  tree["layer1"]["k"] = tree["layer1"]["k"].astype(jnp.bfloat16)
  return tree


def _two_steps(txs, params):
  # Independent gradients: proportional ones would leave SOAP's rotated second step with entries
  # at rounding level, whose signs Adam's first step amplifies.
  rng = np.random.default_rng(1)
  grads = [jax.tree_util.tree_map(lambda p: jnp.asarray(rng.normal(size=p.shape), p.dtype), params)
           for _ in range(2)]
  out = {}
  for name, tx in txs.items():
    state = tx.init(params)
    for g in grads:
      updates, state = tx.update(g, state, params)
    out[name] = (updates, state)
  return out


@pytest.fixture(scope="module")
def both_paths():
  params = layers(2)
  # Whole groups: with "auto" chunks one CPU device would split these groups of two into chunks of
  # one matrix each, and the comparison would not see the stacked computation at all.
  return {grouping: jax.jit(lambda p, ex=ex: _two_steps({name: make(ex) for name, make in OPTIMIZERS.items()}, p))(
      params) for grouping, ex in ((True, WHOLE), (False, ALONE))}


# x64 off only: the two programs (every optimizer, both paths) are the suite's costliest compile in
# the x64 pass, and grouping does not read the x64 mode (float64 groups are traced the same way).
@pytest.mark.x32_only
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_groups_equal_the_per_parameter_path(both_paths, name):
  _assert_paths_agree(both_paths[True][name], both_paths[False][name], name)


def _assert_paths_agree(grouped, per_leaf, name):
  assert jax.tree_util.tree_structure(grouped) == jax.tree_util.tree_structure(per_leaf)
  tol = 1e-12 if X64 else 2e-6
  for (path, a), b in zip(jax.tree_util.tree_flatten_with_path(grouped)[0], jax.tree_util.tree_leaves(per_leaf)):
    if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
      continue
    assert a.dtype == b.dtype and a.shape == b.shape, jax.tree_util.keystr(path)
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    scale = max(1.0, float(np.max(np.abs(b)))) if b.size else 1.0
    # A group's statistics come from one batched matrix product, a parameter's from its own: they
    # may differ in the last bit, and eigenvectors amplify that by the inverse gap between
    # eigenvalues (7e-6 for these 6x6 statistics in float32).
    loose = 50 if ".eigenbases" in jax.tree_util.keystr(path) else 1
    np.testing.assert_allclose(a, b, rtol=0, atol=loose * tol * scale,
                               err_msg=f"{name} {jax.tree_util.keystr(path)}")


@pytest.mark.x32_only  # as above: grouping does not read the x64 mode
def test_chunks_of_unequal_sizes_equal_the_per_parameter_path():
  """A group split into chunks runs them as the leaves of one leafwise call: chunks of unequal sizes
  (4 members in 3 chunks: 1, 1, 2; 6 members in 4: 1, 2, 1, 2) and chunks of one matrix (3 members
  in 4 chunks) give the per-parameter results."""
  execution = MatrixExecution(chunks=3)
  assert execution.bounds(4, 0, ("cores", 1)) == [(0, 1), (1, 2), (2, 4)]
  assert MatrixExecution(chunks=4).bounds(6, 0, ("cores", 1)) == [(0, 1), (1, 3), (3, 4), (4, 6)]
  trees = {"three chunks": (layers(4), ("soap", "shampoo"), execution),
           "mixed chunks": (layers(6), ("muon", "galore"), MatrixExecution(chunks=4)),
           "chunks of one": (layers(3), ("muon", "galore"), MatrixExecution(chunks=4))}
  results = {grouping: jax.jit(lambda ps, grouping=grouping: {
      kind: _two_steps({name: OPTIMIZERS[name](ex if grouping else ALONE) for name in names}, ps[kind])
      for kind, (_, names, ex) in trees.items()})({kind: tree for kind, (tree, _, _) in trees.items()})
      for grouping in (True, False)}
  for kind, (_, names, _) in trees.items():
    for name in names:
      _assert_paths_agree(results[True][kind][name], results[False][kind][name], f"{name} ({kind})")


def test_the_auto_chunk_rules_are_measured_rules_of_one_cpu_device():
  """``chunks="auto"`` on one CPU device: the optimizer's rule, per core (GaLore's four per core)
  or by bytes (SOAP's and Shampoo's: at least one chunk per core, then chunks of about the rule's
  bytes; a group within them stays whole), or none (Muon, PSGD-Kron: their chunks did not pay);
  elsewhere (``cores=0``: an accelerator, or several devices dividing groups by owners) one batch
  per group."""
  assert [steadax.soap(0.1).transforms[0].cpu_chunks, steadax.contrib.galore(0.1).transforms[0].cpu_chunks,
          steadax.psgd_kron(0.1).transforms[0].cpu_chunks] == [("bytes", 512 * 1024), ("cores", 4), None]
  auto = MatrixExecution()
  assert auto.bounds(9, 0, None, cores=2) == [(0, 9)]
  assert auto.bounds(9, 0, ("cores", 1), cores=3) == [(0, 3), (3, 6), (6, 9)]
  assert auto.bounds(6, 0, ("cores", 4), cores=1) == [(0, 1), (1, 3), (3, 4), (4, 6)]
  assert auto.bounds(4, 448, ("bytes", 1000), cores=3) == [(0, 1), (1, 2), (2, 4)]  # 1,792 bytes: 3 chunks
  assert auto.bounds(8, 448, ("bytes", 1000), cores=3) == [(0, 2), (2, 4), (4, 6), (6, 8)]  # 3,584: 4
  assert auto.bounds(4, 100, ("bytes", 1000), cores=3) == [(0, 4)]  # within 1,000 bytes: whole
  assert auto.bounds(6, 0, ("cores", 4), cores=0) == [(0, 6)]
  assert MatrixExecution(chunks=None).bounds(6, 0, ("cores", 4), cores=2) == [(0, 6)]
  with pytest.raises(ValueError, match="MatrixExecution: chunks must be"):
    MatrixExecution(chunks=0)


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_the_traced_update_does_not_grow_with_depth(name):
  # Whole groups, as on an accelerator or a mesh: on one CPU device "auto" splits a group into a
  # bounded number of chunks, so there the trace grows with depth until every group has that many.
  tx = OPTIMIZERS[name](WHOLE)

  def count(depth):
    params = layers(depth)
    jaxpr = jax.make_jaxpr(lambda p, s: tx.update(p, s, p))(params, jax.eval_shape(tx.init, params))
    return str(jaxpr).count(SIGNATURE[name])

  # Depth 2 and 6 have the same distinct shapes (one bfloat16 leaf among them): the same number of
  # matrix computations. Per parameter, depth 6 would have three times as many.
  assert count(6) == count(2) > 0


def test_a_group_splits_into_one_compiled_kernel():
  """XLA compiles every distinct fused computation on its own (about 20 ms each on a CPU) and
  identical ones once. The members of a stacked group are taken by gathers from constant index
  arrays, one kernel for the whole group: slices (``x[i]``) would be one distinct kernel per member,
  and the compile time of a group's split would grow with depth (issue 22)."""
  x = jnp.arange(6 * 4 * 3, dtype=DTYPE).reshape(6, 4, 3)
  compiled = jax.jit(lambda x: _runner.unstack(x * 2, 6)).lower(x).compile()
  members = compiled(x)
  for i, member in enumerate(members):
    np.testing.assert_array_equal(member, np.asarray(x[i]) * 2)
  # The fused computations' bodies, names and metadata left out: equal bodies are one kernel.
  bodies = re.findall(r"^%fused_computation[\w.]* \(.*?\{\n(.*?)^\}", compiled.as_text(), re.M | re.S)
  kernels = {re.sub(r"%[\w.\-]+|, metadata=\{[^}]*\}", "", body) for body in bodies}
  assert len(bodies) >= 6 and len(kernels) <= 2, kernels


@pytest.mark.parametrize("name", ["soap", "shampoo", "psgd_kron"])
def test_a_sweep_refreshes_the_preconditioner_only_at_refresh_steps(name):
  """Under ``steadax.sweep`` (vmap over configurations) the step count is batched; a ``lax.cond`` on
  a batched predicate becomes a select of both branches, and the eigendecompositions (PSGD's fit)
  ran at every step. The refresh decides on "any configuration refreshes", unbatched: the traced
  sweep update keeps its ``cond``."""
  factories = {"soap": lambda learning_rate: steadax.soap(learning_rate, precondition_frequency=10),
               "shampoo": lambda learning_rate: steadax.shampoo(learning_rate, precondition_frequency=10),
               "psgd_kron": lambda learning_rate: steadax.psgd_kron(learning_rate,
                                                                    preconditioner_update_probability=0.1)}
  opt = steadax.sweep(factories[name], learning_rate=[0.1, 0.01])
  params = {"w": jnp.ones((2, 4, 3), DTYPE)}
  state = jax.eval_shape(jax.vmap(lambda tx, p: tx.init(p)), opt, params)
  jaxpr = jax.make_jaxpr(jax.vmap(lambda tx, g, s, p: tx.update(g, s, p)))(opt, params, state, params)
  assert str(jaxpr).count(" cond[") == 1


LAPACK_OPERAND = re.compile(r"custom_call @(lapack_\w+)\(.*?\).*?: \(tensor<([^>]*)>")


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the one-matrix calls are a CPU backend's")
@pytest.mark.parametrize("name", ["soap", "shampoo", "psgd_kron", "galore"])
def test_lapack_calls_take_one_matrix_each_on_cpu(name):
  """jaxlib's CPU LAPACK kernels split a batch over the thread pool XLA runs the program on and
  block a pool thread waiting for it; two batched calls in flight at once (a group's left and right
  factors) took both threads of a 2-core machine and SOAP's step never returned. On a CPU backend a
  group's (and a sweep's) decompositions and solves run one matrix per call."""
  params = layers(2)
  grads = jax.tree_util.tree_map(lambda p: p * 0.5, params)
  tx = OPTIMIZERS[name]()
  state = jax.eval_shape(tx.init, params)
  grouped = jax.jit(tx.update).lower(grads, state, params).as_text()
  learning_rates = {"soap": lambda lr: steadax.soap(lr, precondition_frequency=1),
                    "shampoo": lambda lr: steadax.shampoo(lr, block_size=4, precondition_frequency=1),
                    "psgd_kron": lambda lr: steadax.psgd_kron(lr),
                    "galore": lambda lr: steadax.contrib.galore(lr, rank=2, update_proj_gap=1)}
  opt = steadax.sweep(learning_rates[name], lr=[0.1, 0.01])
  single = {"w": jnp.ones((4, 6), DTYPE)}
  sweep_state = jax.eval_shape(jax.vmap(lambda t, p: t.init(p), in_axes=(0, None)), opt, single)
  swept = jax.jit(jax.vmap(lambda t, g, s, p: t.update(g, s, p), in_axes=(0, None, 0, None))).lower(
      opt, single, sweep_state, single).as_text()
  for text in (grouped, swept):
    calls = LAPACK_OPERAND.findall(text)
    assert calls, "no LAPACK call found"
    shapes = {shape.count("x") for _, shape in calls}  # "4x4xf32": two axes
    assert shapes == {2}, sorted(set(calls))


@pytest.mark.x32_only
@pytest.mark.parametrize("name", ["muon", "galore"])
def test_a_group_is_split_into_stacked_chunks(name):
  """``chunks=4``: 8 equal matrices run as 4 stacks of 2 (what "auto" gives Muon and GaLore on one
  CPU core, whose chains of products differ in length between groups)."""
  tx = OPTIMIZERS[name](MatrixExecution(chunks=4))
  params = {f"w{i}": jnp.full((8, 8), 0.1 * (i + 1), jnp.float32) for i in range(8)}
  text = jax.jit(tx.update).lower(params, tx.init(params), params).as_text()
  # Stacks of more than one matrix (the members' own 1x8x8 slices left out): the chunks'.
  stacked = {int(n) for n in re.findall(r"tensor<(\d+)x8x8xf32>", text)} - {1}
  assert stacked == {2}, sorted(stacked)


def test_members_of_a_vmap_refresh_at_their_own_steps():
  """Under ``vmap`` with the step counts batched (states at different steps), each member gets its
  own branch's value: the one at a refresh step its new eigenbases, the other its old ones."""
  tx = steadax.scale_by_soap(precondition_frequency=2)
  rng = np.random.default_rng(0)
  params, first, second, grads = ({"w": jnp.asarray(rng.normal(size=(2, 4, 3)), DTYPE)} for _ in range(4))
  at_1 = tx.update(first, tx.init(params), params)[1]
  at_2 = tx.update(second, at_1, params)[1]
  both = jax.tree_util.tree_map(lambda a, b: jnp.stack([a, b]), at_1, at_2)
  swept = jax.jit(jax.vmap(lambda s: tx.update(grads, s, params)))(both)
  for i, state in enumerate((at_1, at_2)):  # counts 2 (a refresh) and 3 (none)
    alone = tx.update(grads, state, params)
    for a, b in zip(jax.tree_util.tree_leaves(swept), jax.tree_util.tree_leaves(alone)):
      np.testing.assert_allclose(np.asarray(a[i], np.float64), np.asarray(b, np.float64), rtol=1e-5, atol=1e-5)
