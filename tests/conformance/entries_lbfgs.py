"""Registry entries: line searches and L-BFGS (their updates need value, grad and value_fn)."""

import steadax

from .registry import Entry, value_extra_args

ENTRIES = [
    Entry("lbfgs", lambda: steadax.lbfgs(), lambda o: o.lbfgs(), extra_args=value_extra_args,
          steps=10, progress=1e-6, notes="a quadratic: converged to 1e-6 of the initial loss in 10 steps"),
    Entry("lbfgs_backtracking",
          lambda: steadax.lbfgs(linesearch=steadax.scale_by_backtracking_linesearch(15)),
          lambda o: o.lbfgs(linesearch=o.scale_by_backtracking_linesearch(15)),
          extra_args=value_extra_args, steps=15, progress=1e-6),
    Entry("sgd_backtracking",
          lambda: steadax.chain(steadax.sgd(1.0), steadax.scale_by_backtracking_linesearch(15)),
          lambda o: o.chain(o.sgd(1.0), o.scale_by_backtracking_linesearch(15)),
          extra_args=value_extra_args, progress=1e-3),
    Entry("sgd_backtracking_store_grad",
          lambda: steadax.chain(steadax.sgd(1.0),
                                steadax.scale_by_backtracking_linesearch(15, store_grad=True)),
          lambda o: o.chain(o.sgd(1.0), o.scale_by_backtracking_linesearch(15, store_grad=True)),
          optax_agrees=False, extra_args=value_extra_args, progress=1e-3,
          notes="Optax 0.2.8's store_grad raises under x64 (tests/linesearch/test_backtracking.py): "
                "compared bit for bit with x64 off only (test_optax_bits.py)"),
    Entry("sgd_zoom",
          lambda: steadax.chain(steadax.sgd(1.0), steadax.scale_by_zoom_linesearch(15)),
          lambda o: o.chain(o.sgd(1.0), o.scale_by_zoom_linesearch(15)),
          extra_args=value_extra_args, progress=1e-3),
]
