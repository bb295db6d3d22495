"""English: optimizer steps at learning rate 0 before a schedule's first positive lr."""

MESSAGES = {
    "dynamics.warmup_steps_at_lr_zero":
        "the first {steps} optimizer steps of {optimizer} ran at learning rate 0 ({share} of its {total} steps): "
        "they moved no parameter; the lr first became {lr} at step {at} ({scheduler})",
    "dynamics.warmup_steps_at_lr_zero.cause":
        "a warm-up whose factor is 0 at step 0 (step / warmup_steps) gives lr 0 until the scheduler is first "
        "stepped; stepped once per epoch or once per update of several optimizer steps, every step before that "
        "call computes its gradients (and feeds Adam's moments) for nothing",
    "dynamics.warmup_steps_at_lr_zero.next":
        "start the warm-up above 0 ((step + 1) / warmup_steps), or step the scheduler before the first update "
        "of each period, so that the first optimizer steps train",
}
