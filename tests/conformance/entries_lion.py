"""Registry entries: Lion."""

import steadax

from .registry import Entry

ENTRIES = [
    Entry("lion", lambda: steadax.lion(0.02, weight_decay=0.01), lambda o: o.lion(0.02, weight_decay=0.01)),
]
