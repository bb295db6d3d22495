"""The non-finite sentinel's one-step-late read (`late_read=True`)."""

MESSAGES = {
    "late.found": "A non-finite value first showed in the {stage} of step {step}, read one step late (late_read=True): the step's update was applied and the step was not replayed",
    "late.stage.data": "batch",
    "late.stage.forward": "model outputs",
    "late.stage.loss": "loss",
    "late.stage.backward": "gradients",
    "late.cause": "late_read=True reads each step's flags at the next step, so the step could not be stopped or replayed; every later step is read at once and localized.",
    "late.next": "Rerun without late_read=True (or with on_anomaly=\"skip_step\") to localize the first non-finite value to its op and line.",
    "late.bad_option": "late_read={given!r}; accepted: True or False",
}
