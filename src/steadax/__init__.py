"""steadax: type-stable, composable gradient processing and optimization for JAX.

``import steadax as optax`` works for Optax's public names; every transformation is a frozen pytree
whose numeric hyperparameters are leaves, and every update obeys the type-stability contract
(see ``docs/contract.md``).
"""

from ._core._base import (
    EmptyState as EmptyState,
    GradientTransformation as GradientTransformation,
    GradientTransformationExtraArgs as GradientTransformationExtraArgs,
    TransformInitFn as TransformInitFn,
    TransformUpdateExtraArgsFn as TransformUpdateExtraArgsFn,
    TransformUpdateFn as TransformUpdateFn,
    Transformation as Transformation,
    apply_updates as apply_updates,
    identity as identity,
    incremental_update as incremental_update,
    init_empty_state as init_empty_state,
    periodic_update as periodic_update,
    set_to_zero as set_to_zero,
    stateless as stateless,
    stateless_with_tree_map as stateless_with_tree_map,
    with_extra_args_support as with_extra_args_support,
)
from ._core._combine import chain as chain, named_chain as named_chain
from ._core._config import is_strict as is_strict, set_strict as set_strict, strict_mode as strict_mode
from ._core._contract import ContractError as ContractError
from ._core._module import Module as Module, static_field as static_field
from ._core._policy import safe_increment as safe_increment
from ._core._tree import global_norm as global_norm
from ._core._types import (
    OptState as OptState,
    Params as Params,
    ScalarOrSchedule as ScalarOrSchedule,
    Schedule as Schedule,
    Updates as Updates,
)
from .optimizers import *  # noqa: F401,F403
from .schedules import *  # noqa: F401,F403
from . import schedules as schedules
from . import contrib as contrib
from .transforms import *  # noqa: F401,F403
from .wrappers import *  # noqa: F401,F403

safe_int32_increment = safe_increment

__version__ = "0.1.0"
