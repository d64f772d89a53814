"""Core v2 in the contrib optimizers: declared state roles and hyperparameter checks on the classes.

Every state record declares its roles (so ``init`` is checked against them), and a bad
hyperparameter raises from the class and from ``.replace`` as well as from the factory.
"""

import jax
import jax.numpy as jnp
import pytest

import steadax
from steadax._core._roles import roles_of
from steadax.contrib import _cocob, _dog, _madgrad, _momo, _prodigy, _dadapt_adamw, _mechanic
from steadax.contrib import _privacy, _reduce_on_plateau, _sam, _schedule_free, _sophia, _complex_valued

STATES = [
    _cocob.COCOBState, _dog.DoGState, _dog.DoWGState, _madgrad.MadgradState, _momo.MomoState,
    _momo.MomoAdamState, _prodigy.ProdigyState, _dadapt_adamw.DAdaptAdamWState, _mechanic.MechanicState,
    _privacy.DifferentiallyPrivateAggregateState, _reduce_on_plateau.ReduceLROnPlateauState, _sam.SAMState,
    _schedule_free.ScheduleFreeState, _sophia.SophiaState, _sophia.HutchinsonState,
    _complex_valued.SplitRealAndImaginaryState,
]


@pytest.mark.parametrize("state_cls", STATES, ids=lambda c: c.__name__)
def test_every_state_declares_its_roles(state_cls):
  roles = roles_of(state_cls)
  assert roles is not None and set(roles) == set(state_cls._fields)


BAD = [
    (lambda: _madgrad.ScaleByMadgrad(0.1, momentum=1.5), "scale_by_madgrad: momentum"),
    (lambda: _cocob.ScaleByCOCOB(alpha=0.0), "scale_by_cocob: alpha"),
    (lambda: _dog.ScaleByDoG(eps=-1.0), "scale_by_dog: eps"),
    (lambda: _dog.ScaleByDoWG(None, eps=0.0), "scale_by_dowg: eps"),
    (lambda: _momo.Momo(beta=1.0), "momo: beta"),
    (lambda: _momo.MomoAdam(lower_bound=None), "momo_adam: lower_bound"),
    (lambda: _prodigy.Prodigy(betas=(1.0, 0.999)), r"prodigy: betas\[0\]"),
    (lambda: _dadapt_adamw.DAdaptAdamW(estim_lr0=0.0), "dadapt_adamw: estim_lr0"),
    (lambda: _mechanic.Mechanize(steadax.sgd(1.0), s_init=0.0), "mechanize: s_init"),
    (lambda: _schedule_free.ScheduleFree(steadax.sgd(1.0), 1.0, b1=0.0), "schedule_free: b1"),
    (lambda: _reduce_on_plateau.ReduceOnPlateau(factor=1.0), "reduce_on_plateau: factor"),
    (lambda: _privacy.DifferentiallyPrivateAggregate(0.0, 1.0), "differentially_private_aggregate: l2_norm_clip"),
    (lambda: _sam.SAM(steadax.sgd(0.1), steadax.sgd(0.1), sync_period=0), "sam: sync_period"),
]


@pytest.mark.parametrize("make, match", BAD, ids=[b[1] for b in BAD])
def test_the_class_checks_its_hyperparameters(make, match):
  with pytest.raises((ValueError, TypeError), match=match):
    make()


@pytest.mark.parametrize("make, change, match", [
    (lambda: steadax.contrib.momo(), dict(beta=1.5), "momo: beta"),
    (lambda: steadax.contrib.prodigy(), dict(estim_lr0=-1.0), "prodigy: estim_lr0"),
    (lambda: steadax.contrib.mechanize(steadax.sgd(1.0)), dict(eps=-1.0), "mechanize: eps"),
    (lambda: steadax.contrib.reduce_on_plateau(), dict(accumulation_size=0), "reduce_on_plateau: accumulation_size"),
])
def test_replace_checks_too(make, change, match):
  with pytest.raises(ValueError, match=match):
    make().replace(**change)


def test_traced_hyperparameters_are_not_checked():
  # A jitted step rebuilds nothing, but a transformation built under jit from traced values must
  # not run the concrete checks.
  @jax.jit
  def build_and_step(beta):
    opt = steadax.contrib.momo(beta=beta)
    p = jnp.ones(2)
    return opt.update(p, opt.init(p), p, value=1.0)[0]

  assert build_and_step(0.5).shape == (2,)


def test_dpsgd_runs_the_one_chain():
  # The chain's own length check, reached through dpsgd's update.
  opt = steadax.contrib.dpsgd(0.1, 1.0, 0.0, seed=0)
  params = jnp.ones(2)
  state = opt.init(params)
  with pytest.raises(ValueError, match="chain: the state holds 2 entries for 3"):
    opt.update(jnp.ones((4, 2)), state[:2], params)
