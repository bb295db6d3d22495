"""The step ledger (issue 26): what each loss term reaches and whether its gradient is
applied, gradients read before the AMP unscale, dropout left on in evaluation.

    _terms    a loss as a sum of terms (graph), each term's leaves, line and source models (tape)
    _ledger   StepLedger: terms pending from backward until applied by a step or dropped
    _amp      clip_grad_norm_ / clip_grad_value_ on gradients still scaled by GradScaler
    _dropout  F.dropout with its default training=True inside a module in eval()
    _checker  LedgerChecker ("step_ledger"), the session glue
"""

from ._checker import LedgerChecker

__all__ = ["LedgerChecker"]
