"""Registry entries: clipping blocks, each chained before a plain optimizer (clip_by_block_rms is
exercised inside adafactor)."""

import steadax

from .registry import Entry

ENTRIES = [
    Entry("clip_by_global_norm+adam", lambda: steadax.chain(steadax.clip_by_global_norm(1.0), steadax.adam(0.1)),
          lambda o: o.chain(o.clip_by_global_norm(1.0), o.adam(0.1))),
    Entry("clip+sgd", lambda: steadax.chain(steadax.clip(0.5), steadax.sgd(0.1)),
          lambda o: o.chain(o.clip(0.5), o.sgd(0.1))),
]
