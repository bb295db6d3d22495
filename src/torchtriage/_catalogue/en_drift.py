"""English: the lr schedule (and weight decay) a run follows against the one its code declares."""

MESSAGES = {
    "dynamics.scheduler_extra_steps":
        "{scheduler} is stepped at every optimizer step ({regular}) and again here between two optimizer "
        "steps, {extra} times: {calls} scheduler steps for {ran} optimizer steps, the schedule runs {ahead} ahead",
    "dynamics.scheduler_extra_steps.cause":
        "a per-step schedule is stepped once per batch, and a second scheduler.step() (per epoch, at the start "
        "of a training function) adds a step each time it runs: the warm-up and the decay finish early",
    "dynamics.scheduler_extra_steps.next":
        "step the scheduler at one cadence: remove this extra scheduler.step(), keep the one after optimizer.step()",
    "dynamics.scheduler_overridden":
        "the learning rate {scheduler} set was overwritten before the optimizer used it: {undone} of its changes "
        "were undone (first at step {first}: it set {set_lr}, the optimizer stepped with {used}), none applied since",
    "dynamics.scheduler_overridden.cause":
        "code outside the scheduler writes param_group['lr'] after scheduler.step() (a manual warm-up that keeps "
        "writing initial_lr once the warm-up is over): the scheduler's decays never take effect",
    "dynamics.scheduler_overridden.next":
        "write the lr by hand only while warming up, then leave the scheduler's value (or express the warm-up "
        "as a scheduler: LinearLR + SequentialLR)",
    "dynamics.scheduler_not_resumed":
        "{scheduler} restarted on resume: its optimizer's state had already counted {unseen} steps, but the "
        "scheduler began at last_epoch {last_epoch} where its cadence ({rate} steps per optimizer step) puts "
        "it at about {expected}",
    "dynamics.scheduler_not_resumed.cause":
        "the checkpoint restored the model and the optimizer but not the scheduler (its state_dict was not saved, "
        "or not loaded with scheduler.load_state_dict): the learning-rate schedule starts over from its first step",
    "dynamics.scheduler_not_resumed.next":
        "save scheduler.state_dict() in the checkpoint and call scheduler.load_state_dict(...) when resuming; "
        "if a new schedule is meant, this is expected",
    "dynamics.weight_decay_inverted":
        "weight decay {wd} lands only on {decayed} 1-D tensors ({decayed_numel} elements: biases, norm scales) "
        "while all {matrices} weight matrices ({matrices_numel} elements, {share}) are in a weight_decay=0 group",
    "dynamics.weight_decay_inverted.cause":
        "the no_decay name test is inverted: parameters whose names match it (bias, LayerNorm.weight) went into "
        "the decayed group and every other parameter into the undecayed one",
    "dynamics.weight_decay_inverted.next":
        "swap the two branches of the name test: no_decay names into the weight_decay=0 group, weight "
        "matrices into the decayed group",
    "dynamics.warmup_restarts":
        "the lr ramped up from {start} to {top} over {rises} steps and dropped back to its start at step {step}, "
        "{restarts} times (steps {steps}): the warm-up restarts instead of reaching its target",
    "dynamics.warmup_restarts.cause":
        "the warm-up is computed from a step counter that restarts every epoch (the step within the epoch) while "
        "the warm-up is longer than one epoch: every epoch begins the ramp again",
    "dynamics.warmup_restarts.next":
        "compute the warm-up from the run's global step (epoch * iters_per_epoch + step), not the step within the "
        "epoch",
    "dynamics.schedule_horizon_accumulated":
        "{scheduler} is stepped once per optimizer update ({calls} steps) but its schedule is sized for {horizon} "
        "steps, {accum}x the updates: with gradient accumulation ({accum} backward calls per update) the run used "
        "{used} of the schedule and ended at lr {lr_end}, {share} of its peak {peak}, where the schedule declares ~0",
    "dynamics.schedule_horizon_accumulated.cause":
        "the scheduler's horizon (num_training_steps, num_warmup_steps, T_max, total_steps) counts micro-batches "
        "(max_train_steps * gradient_accumulation_steps) while the scheduler only steps when the optimizer does "
        "(after optimizer.step(), or accelerate's prepared scheduler): the warm-up lasts {accum}x longer and the "
        "decay never comes",
    "dynamics.schedule_horizon_accumulated.next":
        "size the schedule in optimizer updates (max_train_steps, not max_train_steps * "
        "gradient_accumulation_steps), or step the scheduler once per micro-batch",
    "dynamics.norm_weights_decayed":
        "weight decay {wd} lands on {scales} normalization scales ({examples}) while the weight_decay=0 group holds "
        "{free} other 1-D tensors ({free_examples}): the no-decay split misses the norm weights; the decay pulled "
        "them by {pull} over the run ({share} of their change)",
    "dynamics.norm_weights_decayed.cause":
        "the no_decay name list does not match this model's normalization layers (\"LayerNorm.weight\" against "
        "layer_norm / layernorm / norm / ln_f): the norm gains are decayed toward 0 every step while the biases "
        "are exempt",
    "dynamics.norm_weights_decayed.next":
        "exempt the normalization weights by module type (isinstance(m, (nn.LayerNorm, ...)), or every 1-D "
        "parameter: p.ndim < 2) rather than by a name list",
    "dynamics.grad_write_discarded":
        "{written} of {tracked} gradients followed were changed in place after optimizer.step() had applied them "
        "(a clip or scale on the previous step's gradients), then reset by zero_grad() before any step read them, "
        "at {steps} steps from step {first} ({examples}): the write had no effect; the gradients the optimizer used "
        "were not clipped",
    "dynamics.grad_write_discarded.cause":
        "the clip runs before this step's backward(): inside a LightningModule's training_step (Lightning zeroes "
        "the gradients and calls backward after it returns), or after optimizer.step(); it acts on stale "
        "gradients that zero_grad() throws away",
    "dynamics.grad_write_discarded.next":
        "clip after backward() and before optimizer.step(): in Lightning, in configure_gradient_clipping (or "
        "Trainer(gradient_clip_val=...)); in a plain loop, between loss.backward() and optimizer.step()",
    "dynamics.scheduler_decay_lost":
        "{scheduler} decayed the lr from {before} to {after}, but its optimizer was replaced before any step used "
        "it: the new {optimizer} over the same parameters started at {used}, the lr from before the decay ({factor}x "
        "the scheduled one), and ran {ran} steps; the decay was reset and never applied",
    "dynamics.scheduler_decay_lost.cause":
        "the optimizer (and its scheduler) were recreated at the scheduler's decay step, with the base learning "
        "rate (optim.Adam(params, opt.learning_rate)) and a fresh scheduler whose counter starts at 0: the schedule "
        "restarts from its first value",
    "dynamics.scheduler_decay_lost.next":
        "build the new optimizer at the lr the schedule had reached (scheduler.get_last_lr()), or keep the "
        "optimizer and change its param groups, or carry the scheduler's state (last_epoch) over",
    "dynamics.scheduler_burst_steps":
        "{scheduler} is stepped {most} times in a row with no optimizer step between, at {bursts} places: {calls} "
        "scheduler steps where it was stepped at {gaps} places; {skipped} of its learning rates were never used by "
        "an optimizer step, and the lr is now {lr_now} ({share} of its peak)",
    "dynamics.scheduler_burst_steps.epochs":
        "{scheduler} is stepped {most} times in a row with no optimizer step between, at each epoch boundary: "
        "{calls} scheduler steps in the run's {epochs} epochs ({per_epoch} per epoch); {skipped} of its learning "
        "rates were never used by an optimizer step, and the lr is now {lr_now} ({share} of its peak)",
    "dynamics.scheduler_burst_steps.cause":
        "the code that steps the scheduler fires on several consecutive batches (a per-epoch step tested with "
        "`index % epoch_length < accumulation`, or called on batches where the optimizer does not step): each "
        "extra call moves the schedule a position the optimizer never trains at, so the decay runs several "
        "times faster than its cadence",
    "dynamics.scheduler_burst_steps.next":
        "step the scheduler only where the optimizer steps, and once per unit its horizon counts (once per epoch "
        "for step_size / milestones in epochs)",
    "dynamics.schedule_past_end":
        "{scheduler} was stepped {calls} times but its schedule ends sooner: its learning rate annealed to its "
        "floor {floor} ({floor_share} of its peak) at its step {horizon}, then climbed back to {back} "
        "({back_share} of the peak {peak}) while training went on",
    "dynamics.schedule_past_end.cause":
        "the schedule's horizon (total steps, T_max, num_training_steps) counts fewer steps than the scheduler is "
        "given: built for global steps or epochs and stepped at every optimizer step or batch, or a total computed "
        "too small; past its end a cosine rises again",
    "dynamics.schedule_past_end.next":
        "step the scheduler once per unit its horizon counts (once per global step, after all its optimizer "
        "steps), or build it for the number of times it is stepped (optimizer steps per global step x steps)",
    "dynamics.warmup_most_of_run":
        "the learning rate warmed up for {steps} of the run's {total} optimizer steps ({share}): it reached its "
        "peak {peak} at step {step} and the decay had {left} steps left (lr {end} at the end); the loss fell "
        "by {drop1} over the warm-up's first half and by {drop2} over its second",
    "dynamics.warmup_most_of_run.cause":
        "the warm-up is a large fraction of the schedule (a warm-up fraction of 0.9 where 0.1 was meant, or "
        "warm-up steps counted in another unit than the total): most of the run trains below its learning "
        "rate, and the loss falls faster as the lr rises, so the early steps were held back",
    "dynamics.warmup_most_of_run.next":
        "set the warm-up to a small share of the run (warmup fraction / ratio 0.01-0.1 of the total steps, "
        "counted in the same unit), and check which of two warm-up settings the scheduler reads",
}
