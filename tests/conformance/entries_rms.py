"""Registry entries: RMSProp (plain, centred, momentum, bias-corrected) and AdaGrad."""

import steadax

from .registry import Entry

ENTRIES = [
    Entry("rmsprop", lambda: steadax.rmsprop(0.05), lambda o: o.rmsprop(0.05)),
    Entry("rmsprop_centered", lambda: steadax.rmsprop(0.05, centered=True),
          lambda o: o.rmsprop(0.05, centered=True)),
    Entry("rmsprop_momentum", lambda: steadax.rmsprop(0.02, momentum=0.9),
          lambda o: o.rmsprop(0.02, momentum=0.9)),
    Entry("rmsprop_bias_correction",
          lambda: steadax.rmsprop(0.05, decay=0.99, eps=1e-6, eps_in_sqrt=False, bias_correction=True,
                                  initial_scale=0.1),
          lambda o: o.rmsprop(0.05, decay=0.99, eps=1e-6, eps_in_sqrt=False, bias_correction=True,
                              initial_scale=0.1)),
    Entry("rmsprop_centered_bias_correction",
          lambda: steadax.rmsprop(0.05, centered=True, bias_correction=True, eps=0.1),
          lambda o: o.rmsprop(0.05, centered=True, bias_correction=True, eps=0.1),
          notes="the first bias-corrected variance is exactly 0: eps=0.1 keeps the first step bounded"),
    Entry("adagrad", lambda: steadax.adagrad(0.3), lambda o: o.adagrad(0.3)),
]
