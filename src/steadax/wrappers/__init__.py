"""Wrappers and combinators around transformations."""

from ._masked import *  # noqa: F401,F403
from ._masked import __all__ as _masked_all
from ._partition import *  # noqa: F401,F403
from ._partition import __all__ as _partition_all
from ._groups import *  # noqa: F401,F403
from ._groups import __all__ as _groups_all
from ._surgery import *  # noqa: F401,F403
from ._surgery import __all__ as _surgery_all
from ._flatten import *  # noqa: F401,F403
from ._flatten import __all__ as _flatten_all
from ._lookahead import *  # noqa: F401,F403
from ._lookahead import __all__ as _lookahead_all
from ._unitwise import *  # noqa: F401,F403
from ._unitwise import __all__ as _unitwise_all
from ._accumulation import *  # noqa: F401,F403
from ._accumulation import __all__ as _accumulation_all
from ._conditionality import *  # noqa: F401,F403
from ._conditionality import __all__ as _conditionality_all
from ._monitoring import *  # noqa: F401,F403
from ._monitoring import __all__ as _monitoring_all
from ._spikes import *  # noqa: F401,F403
from ._spikes import __all__ as _spikes_all

__all__ = [*_masked_all, *_partition_all, *_groups_all, *_surgery_all, *_flatten_all,
           *_lookahead_all, *_unitwise_all, *_accumulation_all, *_conditionality_all,
           *_monitoring_all, *_spikes_all]
