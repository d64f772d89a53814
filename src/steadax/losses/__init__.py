"""Loss functions: Optax's ``optax.losses`` surface, numerically stable and dtype-preserving.

Every loss computes in at least float32 and returns the floating dtype of its inputs (bfloat16 in,
bfloat16 out); integer labels and ``where`` masks are validated at trace time. See
``docs/losses.md`` for the list by category.
"""

from ._classification import *  # noqa: F401,F403
from ._classification import __all__ as _classification_all
from ._ctc import *  # noqa: F401,F403
from ._ctc import __all__ as _ctc_all
from ._divergence import *  # noqa: F401,F403
from ._divergence import __all__ as _divergence_all
from ._fenchel_young import *  # noqa: F401,F403
from ._fenchel_young import __all__ as _fenchel_young_all
from ._margin import *  # noqa: F401,F403
from ._margin import __all__ as _margin_all
from ._ranking import *  # noqa: F401,F403
from ._ranking import __all__ as _ranking_all
from ._regression import *  # noqa: F401,F403
from ._regression import __all__ as _regression_all
from ._segmentation import *  # noqa: F401,F403
from ._segmentation import __all__ as _segmentation_all
from ._self_supervised import *  # noqa: F401,F403
from ._self_supervised import __all__ as _self_supervised_all
from ._smoothing import *  # noqa: F401,F403
from ._smoothing import __all__ as _smoothing_all

__all__ = [
    *_classification_all,
    *_ctc_all,
    *_divergence_all,
    *_fenchel_young_all,
    *_margin_all,
    *_ranking_all,
    *_regression_all,
    *_segmentation_all,
    *_self_supervised_all,
    *_smoothing_all,
]
