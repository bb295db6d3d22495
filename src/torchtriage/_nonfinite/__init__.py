"""The non-finite sentinel (check name "nonfinite"): detect cheaply, localize by replay.

    _sentinel   NonFiniteSentinel: on-device flags at the step's boundaries, one sync per step,
                policy skip_step, series loss / grad_norm
    _flags      a step's flags: computed at their events, or kept and normed at the read
    _localize   stage localizers (data, forward, loss, backward, optimizer) → Finding
    _replay     replaying a step without touching the user's run (RNG, buffers, autocast)
    _trace      OpTracer (TorchDispatchMode with taint) and ModuleStack
    _families   op families: evidence, cause and next check
    _amp        GradScaler: skipped steps (info) vs a collapsing scale (warning)
"""

from ._sentinel import NonFiniteSentinel as NonFiniteSentinel

__all__ = ["NonFiniteSentinel"]
