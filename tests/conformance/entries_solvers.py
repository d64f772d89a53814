"""Registry entries: L-BFGS-B (its updates need value, grad and value_fn; real parameters only).

No Optax factory (Optax has no L-BFGS-B); tests/solvers/test_lbfgsb.py compares it with scipy's.
"""

import steadax

from .registry import Entry, value_extra_args

ENTRIES = [
    Entry("lbfgsb", lambda: steadax.lbfgsb(0.0, None, memory_size=3),
          extra_args=value_extra_args, complex_ok=False, steps=10, progress=0.01,
          notes="non-negative: some coordinates of the minimiser are negative, so bounds are active"),
]
