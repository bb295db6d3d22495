"""Training dynamics (check name "dynamics", issue 19): runs that neither crash nor learn.

    _checker    DynamicsChecker: per-step lr, the sentinel's loss / grad norm, sampled per-layer
                numbers; feeds the detectors; the session glue
    _trends     divergence (geometric growth), gradient spikes, stagnation, loss at the prior
    _layers     sampled per-layer gradient norms and update-to-parameter ratios; vanishing layers
    _schedules  LR schedulers: who steps them and when; epoch-scale schedules stepped per batch,
                scheduler before optimizer, a warm-up that never ends, lr reaching 0
    _drift      the schedule followed vs declared: extra scheduler steps, scheduler changes
                overwritten before use, a scheduler restarted on resume
    _ramps      a warm-up that restarts (a ramp cut off by a drop to its start, twice)
    _decay      weight decay by tensor rank: decay on 1-D tensors only (no_decay test inverted)
    _order      clip_grad_norm_ before backward / after step; accumulated losses not divided
    _evalcode   the evaluation / metric region: (N, 1) vs (N,) outside the loss, softmax over
                the batch or over one unit
    _causal     the automatic causal probe for sequence models trained on shifted targets
    _common     building findings from the catalogue
"""

from ._checker import DynamicsChecker as DynamicsChecker

__all__ = ["DynamicsChecker"]
