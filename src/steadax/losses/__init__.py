"""Loss functions: Optax's ``optax.losses`` surface, numerically stable and dtype-preserving.

Every loss computes in at least float32 and returns the floating dtype of its inputs (bfloat16 in,
bfloat16 out); integer labels and ``where`` masks are validated at trace time. See
``docs/losses.md`` for the list by category.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from .._core._lazy import lazy_surface as _lazy_surface

# The re-exports, read by pyright, IDEs and the API reference as written, and at run time by
# ``lazy_surface``: each name is imported when first read (``_core/_lazy.py``).
if _TYPE_CHECKING:
  from ._classification import (
      softmax_cross_entropy as softmax_cross_entropy,
      softmax_cross_entropy_with_integer_labels as softmax_cross_entropy_with_integer_labels,
      safe_softmax_cross_entropy as safe_softmax_cross_entropy,
      sigmoid_binary_cross_entropy as sigmoid_binary_cross_entropy,
      sigmoid_focal_loss as sigmoid_focal_loss,
      poly_loss_cross_entropy as poly_loss_cross_entropy,
  )
  from ._ctc import ctc_loss as ctc_loss, ctc_loss_with_forward_probs as ctc_loss_with_forward_probs
  from ._divergence import (
      kl_divergence as kl_divergence,
      kl_divergence_with_log_targets as kl_divergence_with_log_targets,
      generalized_kl_divergence as generalized_kl_divergence,
      convex_kl_divergence as convex_kl_divergence,
  )
  from ._fenchel_young import make_fenchel_young_loss as make_fenchel_young_loss
  from ._margin import (
      hinge_loss as hinge_loss,
      perceptron_loss as perceptron_loss,
      sparsemax_loss as sparsemax_loss,
      multiclass_hinge_loss as multiclass_hinge_loss,
      multiclass_perceptron_loss as multiclass_perceptron_loss,
      multiclass_sparsemax_loss as multiclass_sparsemax_loss,
  )
  from ._ranking import ranking_softmax_loss as ranking_softmax_loss
  from ._regression import (
      squared_error as squared_error,
      l2_loss as l2_loss,
      huber_loss as huber_loss,
      log_cosh as log_cosh,
      cosine_similarity as cosine_similarity,
      cosine_distance as cosine_distance,
  )
  from ._segmentation import (
      dice_loss as dice_loss,
      multiclass_generalized_dice_loss as multiclass_generalized_dice_loss,
      binary_dice_loss as binary_dice_loss,
  )
  from ._self_supervised import ntxent as ntxent, triplet_margin_loss as triplet_margin_loss
  from ._smoothing import smooth_labels as smooth_labels

__all__ = [
    "binary_dice_loss", "convex_kl_divergence", "cosine_distance", "cosine_similarity", "ctc_loss",
    "ctc_loss_with_forward_probs", "dice_loss", "generalized_kl_divergence", "hinge_loss", "huber_loss",
    "kl_divergence", "kl_divergence_with_log_targets", "l2_loss", "log_cosh", "make_fenchel_young_loss",
    "multiclass_generalized_dice_loss", "multiclass_hinge_loss", "multiclass_perceptron_loss",
    "multiclass_sparsemax_loss", "ntxent", "perceptron_loss", "poly_loss_cross_entropy",
    "ranking_softmax_loss", "safe_softmax_cross_entropy", "sigmoid_binary_cross_entropy",
    "sigmoid_focal_loss", "smooth_labels", "softmax_cross_entropy",
    "softmax_cross_entropy_with_integer_labels", "sparsemax_loss", "squared_error", "triplet_margin_loss",
]

__getattr__, __dir__ = _lazy_surface(__name__, __file__)[:2]
