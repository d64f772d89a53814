"""Registry entries: Optax's learning-rate-free contrib optimizers (D-Adaptation, DoG, DoWG, Mechanic,
MoMo, COCOB).

The blocks ``scale_by_dog``, ``scale_by_dowg`` and ``scale_by_cocob`` run inside ``dog``, ``dowg`` and
``cocob`` (between an identity or weight decay and the learning rate); the variants cover every
``init_step`` kind but ``"distance"`` (tests/contrib/test_lrfree.py), both MoMo lower-bound modes
(the step is shared by ``momo`` and ``momo_adam``), schedules and weight decay. Each entry costs about
a minute of the suite (mostly test_composition's wrappers), so variants are few.
"""

import steadax

from .registry import Entry, value_extra_args

ENTRIES = [
    Entry("dadapt_adamw", lambda: steadax.contrib.dadapt_adamw(estim_lr0=1e-2),
          lambda o: o.contrib.dadapt_adamw(estim_lr0=1e-2), optax_atol=1e-4,
          notes="the distance estimate amplifies float32 summation-order differences (6e-5 at 25 steps)"),
    Entry("dadapt_adamw_schedule_weight_decay",
          lambda: steadax.contrib.dadapt_adamw(steadax.linear_schedule(1.0, 0.5, 50), estim_lr0=1e-2,
                                               weight_decay=0.1),
          lambda o: o.contrib.dadapt_adamw(o.linear_schedule(1.0, 0.5, 50), estim_lr0=1e-2, weight_decay=0.1),
          optax_atol=1e-4, notes="as dadapt_adamw"),
    Entry("dog", lambda: steadax.contrib.dog(), lambda o: o.contrib.dog(), steps=100,
          notes="the default initial distance (1e-6 (1 + ||x0||)) needs ~80 steps to grow"),
    Entry("dog_learning_rate_weight_decay",
          lambda: steadax.contrib.dog(steadax.linear_schedule(1.0, 0.5, 50), init_step=("learning_rate", 0.1),
                                      weight_decay=0.01),
          lambda o: o.contrib.dog(o.linear_schedule(1.0, 0.5, 50), init_step=("learning_rate", 0.1),
                                  weight_decay=0.01)),
    Entry("dowg", lambda: steadax.contrib.dowg(), lambda o: o.contrib.dowg()),
    Entry("dowg_init_weight_decay", lambda: steadax.contrib.dowg(init_estim_sq_dist=0.1, weight_decay=0.01),
          lambda o: o.contrib.dowg(init_estim_sq_dist=0.1, weight_decay=0.01)),
    Entry("mechanize_sgd", lambda: steadax.contrib.mechanize(steadax.sgd(1.0)),
          lambda o: o.contrib.mechanize(o.sgd(1.0))),
    Entry("mechanize_adam",
          lambda: steadax.contrib.mechanize(steadax.adam(1.0), weight_decay=0.0, num_betas=4),
          lambda o: o.contrib.mechanize(o.adam(1.0), weight_decay=0.0, num_betas=4)),
    Entry("momo", lambda: steadax.contrib.momo(), lambda o: o.contrib.momo(), extra_args=value_extra_args),
    Entry("momo_adam_adapt_lower_bound_weight_decay",
          lambda: steadax.contrib.momo_adam(1.0, lower_bound=-1.0, weight_decay=0.01, adapt_lower_bound=True),
          lambda o: o.contrib.momo_adam(1.0, lower_bound=-1.0, weight_decay=0.01, adapt_lower_bound=True),
          extra_args=value_extra_args),
    Entry("cocob", lambda: steadax.contrib.cocob(), lambda o: o.contrib.cocob()),
    Entry("cocob_schedule_weight_decay",
          lambda: steadax.contrib.cocob(steadax.linear_schedule(1.0, 0.5, 50), alpha=10.0, weight_decay=0.01),
          lambda o: o.contrib.cocob(o.linear_schedule(1.0, 0.5, 50), alpha=10.0, weight_decay=0.01)),
]
