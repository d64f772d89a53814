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
from ._core._module import (
    Fn as Fn,
    Module as Module,
    child_field as child_field,
    hyper_field as hyper_field,
    static_field as static_field,
)
from ._core._policy import safe_increment as safe_increment
from ._core._tree import global_norm as global_norm
from ._core._types import (
    MaskOrFn as MaskOrFn,
    OptState as OptState,
    Params as Params,
    ScalarOrSchedule as ScalarOrSchedule,
    Schedule as Schedule,
    Updates as Updates,
)
from .linesearch import *  # noqa: F401,F403
from .optimizers import *  # noqa: F401,F403
from .schedules import *  # noqa: F401,F403
from . import schedules as schedules
from . import contrib as contrib
from .transforms import *  # noqa: F401,F403
from .wrappers import *  # noqa: F401,F403
from . import microbatching as microbatching
from .microbatching import microbatch as microbatch
from . import losses as losses
from . import assignment as assignment
from . import perturbations as perturbations
from . import tree as tree
from . import tree_utils as tree_utils
# The rest of Optax's surface (issue 5): linear algebra, utilities, projections, second order,
# experimental.
from ._linalg import *  # noqa: F401,F403
from ._utils import *  # noqa: F401,F403
from . import projections as projections
from . import second_order as second_order
from . import experimental as experimental
from .tree_utils import tree_map_params as tree_map_params
# The loss names Optax also keeps at its top level (optax 0.2.8).
from .losses import (
    convex_kl_divergence as convex_kl_divergence,
    cosine_distance as cosine_distance,
    cosine_similarity as cosine_similarity,
    ctc_loss as ctc_loss,
    ctc_loss_with_forward_probs as ctc_loss_with_forward_probs,
    generalized_kl_divergence as generalized_kl_divergence,
    hinge_loss as hinge_loss,
    huber_loss as huber_loss,
    kl_divergence as kl_divergence,
    l2_loss as l2_loss,
    log_cosh as log_cosh,
    ntxent as ntxent,
    safe_softmax_cross_entropy as safe_softmax_cross_entropy,
    sigmoid_binary_cross_entropy as sigmoid_binary_cross_entropy,
    sigmoid_focal_loss as sigmoid_focal_loss,
    smooth_labels as smooth_labels,
    softmax_cross_entropy as softmax_cross_entropy,
    softmax_cross_entropy_with_integer_labels as softmax_cross_entropy_with_integer_labels,
    squared_error as squared_error,
)

safe_int32_increment = safe_increment

__version__ = "0.1.0"
