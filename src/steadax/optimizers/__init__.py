"""Optimizers assembled from the building blocks, one module per family."""

from ._adam import *  # noqa: F401,F403
from ._adam import __all__ as _adam_all
from ._factored import *  # noqa: F401,F403
from ._factored import __all__ as _factored_all
from ._lbfgs import *  # noqa: F401,F403
from ._lbfgs import __all__ as _lbfgs_all
from ._lion import *  # noqa: F401,F403
from ._lion import __all__ as _lion_all
from ._rms import *  # noqa: F401,F403
from ._rms import __all__ as _rms_all
from ._sgd import *  # noqa: F401,F403
from ._sgd import __all__ as _sgd_all
from ._trust_ratio import *  # noqa: F401,F403
from ._trust_ratio import __all__ as _trust_ratio_all

# Optax's remaining main-namespace optimizers (issue 3).
from ._adam_variants import *  # noqa: F401,F403
from ._adam_variants import __all__ as _adam_variants_all
from ._adaptive import *  # noqa: F401,F403
from ._adaptive import __all__ as _adaptive_all
from ._fromage import *  # noqa: F401,F403
from ._fromage import __all__ as _fromage_all
from ._optimistic import *  # noqa: F401,F403
from ._optimistic import __all__ as _optimistic_all
from ._sgd_variants import *  # noqa: F401,F403
from ._sgd_variants import __all__ as _sgd_variants_all
from ._sign import *  # noqa: F401,F403
from ._sign import __all__ as _sign_all

__all__ = [*_adam_all, *_lbfgs_all, *_sgd_all, *_factored_all, *_lion_all, *_rms_all, *_trust_ratio_all,
           *_adam_variants_all, *_adaptive_all, *_fromage_all, *_optimistic_all, *_sgd_variants_all, *_sign_all]

# Beyond Optax: MARS, PSGD-Kron, low-memory Adam (issue 3).
from ._lowmem import *  # noqa: F401,F403
from ._lowmem import __all__ as _lowmem_all
from ._mars import *  # noqa: F401,F403
from ._mars import __all__ as _mars_all
from ._psgd_kron import *  # noqa: F401,F403
from ._psgd_kron import __all__ as _psgd_kron_all

__all__ += [*_lowmem_all, *_mars_all, *_psgd_kron_all]

# Beyond Optax: SOAP and Shampoo (issue 3).
from ._shampoo import *  # noqa: F401,F403
from ._shampoo import __all__ as _shampoo_all
from ._soap import *  # noqa: F401,F403
from ._soap import __all__ as _soap_all

__all__ += [*_shampoo_all, *_soap_all]
