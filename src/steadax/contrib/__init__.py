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

# Adaptive, second-order, sharpness-aware, plateau, privacy and complex-valued contrib (issue 3).
from ._acprop import *  # noqa: F401,F403
from ._acprop import __all__ as _acprop_all
from ._ademamix import *  # noqa: F401,F403
from ._ademamix import __all__ as _ademamix_all
from ._adopt import *  # noqa: F401,F403
from ._adopt import __all__ as _adopt_all
from ._complex_valued import *  # noqa: F401,F403
from ._complex_valued import __all__ as _complex_valued_all
from ._madgrad import *  # noqa: F401,F403
from ._madgrad import __all__ as _madgrad_all
from ._privacy import *  # noqa: F401,F403
from ._privacy import __all__ as _privacy_all
from ._reduce_on_plateau import *  # noqa: F401,F403
from ._reduce_on_plateau import __all__ as _reduce_on_plateau_all
from ._sam import *  # noqa: F401,F403
from ._sam import __all__ as _sam_all
from ._sophia import *  # noqa: F401,F403
from ._sophia import __all__ as _sophia_all

__all__ += [*_acprop_all, *_ademamix_all, *_adopt_all, *_complex_valued_all, *_madgrad_all, *_privacy_all,
            *_reduce_on_plateau_all, *_sam_all, *_sophia_all]

# Orthogonalized and low-rank-projected optimizers (issue 3).
from ._galore import *  # noqa: F401,F403
from ._galore import __all__ as _galore_all
from ._muon import *  # noqa: F401,F403
from ._muon import __all__ as _muon_all

__all__ += [*_galore_all, *_muon_all]
