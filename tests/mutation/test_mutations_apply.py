"""The mutation script (``make mutate``) stays meaningful: each mutation still finds its text.

Running the mutations takes ~10 pytest processes (about 3 minutes on 2 cores), so it is a make
target, not part of ``make test``; this cheap check makes a refactor that moves the mutated code
fail here, so the mutation is updated rather than silently testing nothing.
"""

from __future__ import annotations

import pytest

from tests.mutation.run import MUTATIONS, ROOT


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_mutation_text_is_found(mutation):
  text = (ROOT / mutation.path).read_text()
  assert text.count(mutation.old) == mutation.count, (
      f"{mutation.name}: the code it mutates moved; update tests/mutation/run.py")
  assert mutation.new != mutation.old
  for test_id in mutation.tests:
    path, _, name = test_id.partition("::")
    assert f"def {name.split('[')[0]}(" in (ROOT / path).read_text(), test_id
