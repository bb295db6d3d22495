"""Silent bugs: computations that are legal, run, and are wrong (seed appendix G).

    _shapes       loss broadcasting ((N, 1) vs (N,)): check_loss_broadcast
    _region       the loss region: a TorchFunctionMode around the user's loss code (first steps)
    _loss_inputs  loss-input semantics: check_loss_inputs
    _sequence     label shift, PAD in the loss, causal and padding probes
    _loop         training-loop mistakes: zero_grad, kept graphs, train/eval, collapse
    _overflow     exp close to the dtype's limit: check_exp_overflow
    _channels     channels-last data reshaped (not permuted) into a convolution's channels
    _checker      SilentChecker, the session-side glue
    _plans/_flags deferred numbers, read once per step
"""

from ._checker import SilentChecker as SilentChecker
from ._loop_api import check_training_loop as check_training_loop
from ._loss_inputs import check_loss_inputs as check_loss_inputs
from ._overflow import check_exp_overflow as check_exp_overflow
from ._sequence import check_causal as check_causal
from ._sequence import check_padding as check_padding
from ._sequence import check_token_shift as check_token_shift
from ._shapes import check_loss_broadcast as check_loss_broadcast
