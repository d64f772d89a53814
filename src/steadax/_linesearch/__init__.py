"""Line searches: backtracking (Armijo) and zoom (strong Wolfe), and value_and_grad_from_state.

An internal layer, not a namespace: it re-exports nothing. The public surfaces (``steadax`` and, for
Optax's ``optax.transforms``-only names, ``steadax.transforms``) import each name from the module
that defines it, so a new public name is one line there, not one more here.
"""

__all__: list[str] = []
