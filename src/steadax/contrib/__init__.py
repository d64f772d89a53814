"""Optax's contrib optimizers (``steadax.contrib.NAME``), held to the same contract."""

from ._cocob import *  # noqa: F401,F403
from ._cocob import __all__ as _cocob_all
from ._dadapt_adamw import *  # noqa: F401,F403
from ._dadapt_adamw import __all__ as _dadapt_adamw_all
from ._dog import *  # noqa: F401,F403
from ._dog import __all__ as _dog_all
from ._mechanic import *  # noqa: F401,F403
from ._mechanic import __all__ as _mechanic_all
from ._momo import *  # noqa: F401,F403
from ._momo import __all__ as _momo_all
from ._prodigy import *  # noqa: F401,F403
from ._prodigy import __all__ as _prodigy_all
from ._schedule_free import *  # noqa: F401,F403
from ._schedule_free import __all__ as _schedule_free_all

__all__ = [*_prodigy_all, *_schedule_free_all]
__all__ += [*_cocob_all, *_dadapt_adamw_all, *_dog_all, *_mechanic_all, *_momo_all]

# Orthogonalized and low-rank-projected optimizers (issue 3).
from ._galore import *  # noqa: F401,F403
from ._galore import __all__ as _galore_all
from ._muon import *  # noqa: F401,F403
from ._muon import __all__ as _muon_all

__all__ += [*_galore_all, *_muon_all]
