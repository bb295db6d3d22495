"""The gradient chain: why a parameter's grad is None, zero, or never applied (issue 4).

    _graph     reachable leaves of an autograd graph (no backward, no kernel)
    _static    unregistered tensors / modules, frozen parameters, the parameter index
    _tracer    op-level witnesses of a cut path (TorchFunctionMode, first steps only)
    _analysis  evidence over the analysis window → findings per parameter group
    _loss      why a loss has no grad_fn
    _checker   GradientChecker, the session check "gradients"
    _diagnose  diagnose_gradients(model, loss, optimizer=None) -> Report
"""

from ._checker import GradientChecker as GradientChecker
from ._diagnose import diagnose_gradients as diagnose_gradients

__all__ = ["GradientChecker", "diagnose_gradients"]
