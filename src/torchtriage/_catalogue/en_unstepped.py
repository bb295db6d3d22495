"""English: learning-rate schedulers made and never stepped."""

MESSAGES = {
    "dynamics.scheduler_never_stepped":
        "the {scheduler} scheduler was never stepped: {optimizer}'s learning rate stayed at {lr} for all {epochs} "
        "training epochs, while the schedule sets it to {next_lr} after {after} step(s)",
    "dynamics.scheduler_never_stepped.cause":
        "a scheduler changes the lr only when scheduler.step() is called; under Lightning's manual optimization "
        "(automatic_optimization = False) the schedulers returned by configure_optimizers are not stepped for you, "
        "and a plain loop must call step() itself",
    "dynamics.scheduler_never_stepped.next":
        "call scheduler.step() after optimizer.step() (once per epoch for an epoch schedule, e.g. when "
        "self.trainer.is_last_batch under manual optimization; once per batch for a per-step schedule)",
    "dynamics.scheduler_never_stepped.steps":
        "the {scheduler} scheduler was never stepped: {optimizer}'s learning rate stayed at {lr} for all {steps} "
        "optimizer steps of the loop at line {loop_line}, while the schedule sets it to {next_lr} after {after} "
        "step(s) and to {end_lr} by the last one",
    "dynamics.scheduler_never_stepped.loop":
        "the {scheduler} scheduler was never stepped: {optimizer}'s learning rate stayed at {lr} for all {epochs} "
        "iterations of the training loop at line {loop_line} ({steps} optimizer steps), while the schedule sets it "
        "to {next_lr} after {after} step(s)",
}
