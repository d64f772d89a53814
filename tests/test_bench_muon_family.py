"""benchmarks/cases/muon_family.py runs: its forward pass with logits is lm.py's, its QK-clip spec
and logits fit lm.py's parameters, and the Gram timing reports. Nothing is timed or trained here
(``python -m benchmarks.cases.muon_family`` measures; a smoke-sized lm_family compiles twelve
programs, more than this suite's budget allows)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax
from benchmarks.cases import lm, muon_family

pytestmark = pytest.mark.x32_only


@pytest.fixture
def model_promotion():
  # lm.py's model is not written for strict or rank-raising promotion (a norm's scale broadcasts).
  previous = jax.config.jax_numpy_dtype_promotion, jax.config.jax_numpy_rank_promotion
  jax.config.update("jax_numpy_dtype_promotion", "standard")
  jax.config.update("jax_numpy_rank_promotion", "allow")
  yield
  jax.config.update("jax_numpy_dtype_promotion", previous[0])
  jax.config.update("jax_numpy_rank_promotion", previous[1])


def test_forward_with_logits_and_one_muon_clip_step(model_promotion):
  config = lm.CONFIGS["smoke"]
  params = lm.init_params(config)
  tokens = jax.random.randint(jax.random.key(0), (2, config.context + 1), 0, lm.VOCAB)
  loss, maxima = muon_family.forward_with_max_logits(params, tokens, config.heads)
  np.testing.assert_allclose(loss, lm.loss_fn(params, tokens, config.heads), rtol=1e-6)
  assert maxima.shape == (config.layers, config.heads)
  # With tau below the logits every block's query and key shrink, head by head; nothing else moves.
  tx = steadax.contrib.qk_clip(muon_family.qk_spec, tau=1e-3)
  zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
  updates, _ = tx.update(zeros, tx.init(params), params,
                         max_logits=muon_family.logits_tree(params, maxima))
  block = updates["blocks"][0]
  assert float(jnp.max(jnp.abs(block["query"]))) > 0 and float(jnp.max(jnp.abs(block["key"]))) > 0
  assert float(jnp.max(jnp.abs(block["value"]))) == 0 and float(jnp.max(jnp.abs(updates["head"]))) == 0


def test_gram_timing_reports():
  rows = muon_family.gram_timings([(8, 32)], rounds=1)
  assert rows[0]["rel_diff"] < 1e-4 and rows[0]["flop_ratio"] > 0
  assert len(muon_family.gram_table(rows)) == 3
