"""English: the step ledger (issue 26): loss terms, scaled gradients, dropout in evaluation."""

MESSAGES = {
    "ledger.best_checkpoint_regressed": "{file} is written only on some evaluations, as a best checkpoint, but {bad} of its {writes} writes replaced a better {metric} with a worse one (first at step {step}: {value} after {before}; {direction} is better): it ends holding {final} while {best} was written before, so the model loaded as the best is not the best seen",
    "ledger.best_checkpoint_regressed.restored": "{file} is written only on some evaluations, as a best checkpoint, but {bad} of its {writes} writes replaced a better {metric} with a worse one (first at step {step}: {value} after {before}; {direction} is better); a later write put the best value back",
    "ledger.best_checkpoint_regressed.cause": "a best-model file must only be overwritten by a better value of the tracked metric; here the comparison let worse values through: the best value not restored when resuming from a checkpoint (reset to {{}} / None / inf), an early stopper's delta with the wrong sign (score < best - delta), or a comparison in the wrong direction",
    "ledger.best_checkpoint_regressed.next": "print the value compared and the best so far at each save; store the best metric in every checkpoint and restore it when resuming; for a score count an epoch as better only when score > best + delta (for a loss: loss < best - delta)",
    "ledger.term_detached.reach":
        "the loss term {term} is computed from {model}'s output but reaches none of {model}'s parameters: "
        "its gradient went to {reach} only and was never applied, while {model} was stepped with the other "
        "terms only ({others})",
    "ledger.term_detached.nothing":
        "the loss term {term} is computed from {model}'s output but reaches no trainable parameter: it costs "
        "compute and changes nothing, while {model} was stepped with the other terms only ({others})",
    "ledger.term_detached.cause":
        "the path from {model}'s output to this term is cut ({cut}): backward cannot carry the term's "
        "gradient to {model}, so the optimizer that steps {model} never sees it",
    "ledger.term_detached.next":
        "compute the term from the output that still has its graph (no .detach() / .data / no_grad between "
        "{model} and the term); detach only inside the other model's own update",
    "ledger.clip_before_unscale":
        "{fn} ran on gradients still multiplied by the GradScaler's scale ({scale}) at step {step}: "
        "scaler.unscale_(optimizer) was not called before it",
    "ledger.clip_before_unscale.cause":
        "scaler.scale(loss).backward() leaves every .grad multiplied by the scale until scaler.step() or "
        "scaler.unscale_(); the clip measured the scaled norm, so its threshold is off by the scale and an "
        "engaged clip shrinks the update by that factor",
    "ledger.clip_before_unscale.next":
        "call scaler.unscale_(optimizer) after backward() and before {fn}, then scaler.step(optimizer)",
    "ledger.dropout_in_eval":
        "{fn}(p={p}) in the forward of {module} ({cls}) drops units although {module} is in eval() mode: "
        "two evaluations of the same input differ",
    "ledger.dropout_in_eval.cause":
        "the functional {fn} takes training=True by default and does not read the module's mode; "
        "model.eval() switches nn.Dropout modules off, not this call",
    "ledger.dropout_in_eval.next":
        "pass training=self.training to {fn} (or use an nn.Dropout module); pass training=True yourself "
        "only for Monte-Carlo dropout",
    "silent.kl_div_input_not_log": "{loss} received inputs that are not log-probabilities",
    "silent.kl_div_input_not_log.cause":
        "kl_div(input, target) expects input = log-probabilities (all values <= 0, e.g. log_softmax); "
        "probabilities or raw scores make it compute target * (log target - input) on the wrong scale: "
        "the loss and its gradient are not the KL divergence",
    "silent.kl_div_input_not_log.next":
        "pass F.log_softmax(scores, dim) as the input (and probabilities as the target, or log_target=True)",
    "ledger.frozen_moved":
        "{opt}.step() changed {count} parameter(s) with requires_grad=False ({first}, ...) at step {step}",
    "ledger.frozen_moved.cause":
        "an optimizer skips a parameter whose .grad is None, not one whose requires_grad is off: these still hold "
        "a .grad tensor (zero_grad(set_to_none=False) keeps zeros), so {settings} keeps moving them although they "
        "are frozen",
    "ledger.frozen_moved.next":
        "set their .grad to None when freezing (p.grad = None, or zero_grad(set_to_none=True)), or take them "
        "out of the optimizer's param groups",
    "ledger.frozen_moved.nograd":
        "{opt}.step() moved {count} frozen parameter(s) (requires_grad=False, no .grad: {first}, ...) from step "
        "{step} on: their values changed by up to {change} although no gradient reached them",
    "ledger.frozen_moved.nograd.cause":
        "torch's optimizers skip a parameter whose .grad is None; this optimizer does not (it fills a missing grad "
        "with zeros, or updates every tensor it holds), so {settings} keeps changing the weights that were frozen",
    "ledger.frozen_moved.nograd.next":
        "skip parameters whose .grad is None in the optimizer's step (`if p.grad is None: continue`), or leave the "
        "frozen parameters out of its param groups",
    "ledger.step_repeated":
        "{opt}.step() ran again on the gradients it had already applied ({repeats} of {steps} judged steps, with "
        "no backward since the step before): the same gradients moved the parameters twice",
    "ledger.step_repeated.cause":
        "two calls step this optimizer for one backward (here and at {other}): a training-step wrapper that "
        "already calls optimizer.step() (or scaler.step(optimizer)) and the loop's own optimizer.step() after it; "
        "every batch is applied twice and the optimizer's state and step count advance twice",
    "ledger.step_repeated.next":
        "keep one optimizer.step() per backward: drop the loop's call when the wrapper steps (or the wrapper's), "
        "and compare the optimizer's step count with the number of batches",
    "ledger.step_counter":
        "{opt}'s step counter {counter} advances by {per} per optimizer.step() (at all {steps} judged steps; it "
        "reads {value}): the step count its bias correction and step-indexed rules use is not the number of steps",
    "ledger.step_counter.cause":
        "the counter is incremented inside the loop over the group's parameters (or more than once in it), so it "
        "advances once per tensor instead of once per step, and each tensor sees a different count",
    "ledger.step_counter.next":
        "increment the counter once per group and step, before the loop over its parameters, and check that it "
        "equals the number of optimizer steps",
    "ledger.optimizer_not_resumed":
        "the run resumed from {file}, which it wrote itself, and loaded the model's weights, but the optimizer state "
        "saved in it ({key}: {states} per-parameter states) never reached an optimizer: a fresh {opt} took {steps} "
        "steps instead ({differs})",
    "ledger.optimizer_not_resumed.cause":
        "the resume restores the model and the epoch counter but never calls optimizer.load_state_dict (an "
        "optimizer argument accepted and ignored, the optimizer rebuilt after the checkpoint was read), so the "
        "learning rate, the schedule and the momentum / Adam moments restart from their initial values",
    "ledger.optimizer_not_resumed.next":
        "create the optimizer (and scheduler) before resuming and load the saved states into them: "
        "optimizer.load_state_dict(checkpoint['optimizer'])",
    "ledger.optimizer_load_failed":
        "{opt}.load_state_dict() raised ({error}) and the run went on: the {held} optimizer states of the loaded "
        "dict never reached this optimizer ({n} parameters), which took {steps} steps from a fresh, empty state",
    "ledger.optimizer_load_failed.cause":
        "the state dict does not fit this optimizer (its groups hold another number of parameters: the saved state "
        "of another optimizer, files swapped on resume), and the code that catches the exception only logs it, so "
        "the resumed run restarts Adam's moments and step count from zero",
    "ledger.optimizer_load_failed.next":
        "load each saved optimizer state into the optimizer it was saved from, and let a failed resume raise (or "
        "check len(optimizer.state) after loading)",
    "ledger.not_moved.low":
        "{count} parameter(s) of {model} ({first}, ...) had non-zero gradients and {opt} stepped {steps} time(s), "
        "yet {share} of their sampled values never changed: the weights are {dtype} and the updates round away",
    "ledger.not_moved.low.cause":
        "the weights are stored in {dtype}: near |w| = {w} its numbers are about {spacing} apart, and an update "
        "smaller than half of that (Adam's steps are about lr = {lr}) rounds back to the old value, so most "
        "weights stay where they are",
    "ledger.not_moved.low.next":
        "keep float32 weights (do not cast the model with .to({dtype}) / .half()) and run the forward under "
        "torch.autocast(dtype={dtype}); or keep a float32 master copy for the optimizer",
    "ledger.not_moved.still":
        "{count} parameter(s) of {model} ({first}, ...) had non-zero gradients and {opt} stepped {steps} time(s) "
        "with lr {lr}, yet none of their sampled values ever changed",
    "ledger.not_moved.still.cause":
        "the optimizer's steps did not reach these values: it updates another tensor (a stale copy, the old "
        "tensor of a parameter replaced after it was built), or something restores them after each step",
    "ledger.not_moved.still.next":
        "check that the optimizer holds the very tensors the model uses (id(p) of model.parameters() against "
        "optimizer.param_groups) and that nothing reloads or overwrites them after step()",
    "ledger.ranks_drift":
        "the replicas of {model} differ after step {step}: {count} parameter(s) ({first}, ...) are not the same "
        "on rank {a} and rank {b}",
    "ledger.ranks_drift.cause":
        "DDP keeps replicas equal only if every rank starts equal, runs the same update and syncs every "
        "gradient; something in this step changed one rank's parameters differently (a rank-local update, "
        "a seed per rank in a parametrization, a gradient that bypassed the sync)",
    "ledger.ranks_drift.next":
        "compare the parameters named on two ranks just before and after step {step}; look for code that "
        "runs on one rank only or updates parameters outside optimizer.step()",
    "ledger.ranks_drift.cause.cast":
        "parameters were cast or moved after the model was wrapped in DistributedDataParallel ({casts}): DDP's "
        "gradient buckets and broadcast were built for the old tensors, so the ranks no longer sync them",
    "ledger.ranks_drift.next.cast":
        "cast and move the model (.to(dtype), .half(), .cuda()) before wrapping it in DistributedDataParallel",
    "ledger.ranks_drift.cause.bypass":
        "the wrapped module was called directly in grad mode ({line}, model.module(x)): DDP syncs gradients only "
        "for calls through the wrapper, so the backward of that call left each rank with its own gradient",
    "ledger.ranks_drift.next.bypass":
        "call the DDP wrapper itself (model(x)) for training; call model.module only under torch.no_grad()",
    "ledger.grad_summed":
        "at step {step} the synced gradient of {count} parameter(s) ({first}, ...) is {ratio} × the mean of "
        "the {world} ranks' own gradients: it was summed over the ranks and never divided",
    "ledger.grad_summed.cause":
        "dist.all_reduce(p.grad) sums by default (ReduceOp.SUM): without a division by the world size, every "
        "step is {world} times larger than the mean gradient, as if the learning rate were {world} times higher",
    "ledger.grad_summed.next":
        "divide after the all_reduce (p.grad /= dist.get_world_size()), use ReduceOp.AVG, or let "
        "DistributedDataParallel average the gradients",
    "ledger.sharded_no_grad":
        "{count} sharded parameter(s) ({first}, ...) had no gradient (.grad None) at any of {steps} optimizer "
        "step(s): they never train",
    "ledger.sharded_no_grad.cause":
        "no backward reached these fully_shard parameters: their module is not called on the way to the loss, "
        "its output is detached or computed under no_grad, or they were replaced after fully_shard",
    "ledger.sharded_no_grad.next":
        "follow the module's output to the loss; apply fully_shard after the model is complete and call the "
        "sharded module (not a copy) in forward",
    "ledger.not_moved.never":
        "{opt} holds {count} parameter(s) of {model} ({first}, ...) that got non-zero gradients in {backwards} "
        "backward pass(es), but its step() was never called: none of their sampled values changed",
    "ledger.not_moved.never.cause":
        "the update is never reached: the condition around optimizer.step() (gradient accumulation, a step "
        "counter) is never true, or step() was left out, so the gradients pile up in .grad and the weights "
        "never change",
    "ledger.not_moved.never.next":
        "check the condition that guards optimizer.step() (e.g. (step + 1) % accumulation_steps with fewer "
        "batches per epoch than accumulation_steps) and that step() runs at least once per epoch",
    "ledger.not_moved.copy":
        "{count} parameter(s) of {model} ({first}, ...) got non-zero gradients in {backwards} backward pass(es) "
        "but no optimizer holds them; {opt} stepped {steps} time(s) on {twins} tensor(s) that never had a "
        "gradient: none of the sampled values changed",
    "ledger.not_moved.copy.cause":
        "the optimizer was built for another copy of these parameters (a deepcopy or clone of the model, or the "
        "parameters before they were replaced): it steps tensors the forward never uses, so {model} never changes",
    "ledger.not_moved.copy.next":
        "build an optimizer from this model's own parameters (type(opt)(model.parameters(), **opt.defaults)) "
        "after copying or replacing the model",
    "ledger.not_moved.gradless":
        "{opt} stepped at every judged step from step {since} on ({steps} of them) while none of the {count} "
        "tensor(s) it holds (of {model}) had a gradient, although backward passes ran: its steps change nothing "
        "the forward uses",
    "ledger.not_moved.gradless.cause":
        "the optimizer holds other tensors than the ones the loss reaches: it was built for the model before a "
        "deepcopy / clone, or before its parameters were replaced, so the model trained from then on never changes",
    "ledger.not_moved.gradless.next":
        "build an optimizer from the parameters of the model you train (type(opt)(model.parameters(), "
        "**opt.defaults)) after copying or replacing it",
    "ledger.term_detached.cause.constant":
        "the term does not require grad: it was computed from {model}'s output through a cut inside the model "
        "(a .detach(), .data, no_grad, or a tensor rebuilt from values), so it is a constant in the loss and its "
        "gradient to {model} is zero whatever its weight",
    "ledger.module_flag":
        "{module}.requires_grad = False set an attribute on the {kind} module, not on its parameters: {n} of "
        "its {total} parameters still require grad, and {opt}.step() moved them (step {step})",
    "ledger.module_flag.cause":
        "nn.Module has no requires_grad flag: assigning one stores a plain Python attribute and freezes nothing; "
        "the parameters keep requires_grad=True, get gradients and stay in the optimizer",
    "ledger.module_flag.next":
        "freeze the parameters: {module}.requires_grad_(False) (or for p in {module}.parameters(): "
        "p.requires_grad = False), or leave them out of the optimizer",
    "ledger.stale_step":
        "{opt}.step() applied gradients no backward wrote since its previous step: the backward at {where} "
        "wrote gradients to {tensors} tensors ({values} values) that no optimizer holds, and none of the {n} "
        "tensors {opt} holds (step {step})",
    "ledger.stale_step.cause":
        "the optimizer was built over another model's parameters (a model rebuilt in a sweep, a restart or a "
        "fold keeps the first model's optimizer): the model trained gets gradients that are never applied, "
        "and the optimizer re-applies the old model's last gradients",
    "ledger.stale_step.next":
        "build the optimizer for each new model, after the model: optimizer = torch.optim.Adam(model.parameters(), ...)",
    "ledger.frozen_norm":
        "{count} frozen normalization layer(s) ({module}, a {kind}, first) were put in eval() on their own at "
        "{eval_line}, and this train() call switched them back to training mode: their running statistics "
        "took in {batches} more training batches although their parameters are frozen, and their running mean "
        "moved by up to {shift} standard deviations",
    "ledger.frozen_norm.own_eval":
        "{count} normalization layer(s) ({module}, a {kind}, first) were put in eval() one by one at {eval_line} to "
        "freeze their running statistics, and this train() call switched them back to training mode: the frozen "
        "statistics took in {batches} more training batches and their running mean moved by up to {shift} "
        "standard deviations (variance by a factor up to {factor})",
    "ledger.frozen_norm.own_eval.cause":
        "eval() is a mode, not a flag that sticks: Module.train() recurses into every submodule, so the "
        "model.train() of each epoch undoes the eval() that froze the BatchNorm statistics; the layers normalize "
        "with batch statistics in training and evaluation uses running statistics overwritten by the new data",
    "ledger.frozen_norm.own_eval.next":
        "put the frozen layers back in eval() after every model.train() (override train() in the model to "
        "re-apply the freeze, or call it right after model.train())",
    "ledger.frozen_norm.train_mode":
        "{count} BatchNorm layer(s) ({module}, a {kind}, first) of the frozen part {part} of {model} ran in "
        "training mode: the part's weights stayed exactly as they were over {steps} optimizer steps, but its "
        "running statistics took in {batches} training batches and its running mean moved by up to {shift} "
        "standard deviations (variance by a factor up to {factor})",
    "ledger.frozen_norm.train_mode.cause":
        "requires_grad=False (or leaving parameters out of the optimizer) freezes the weights, not the "
        "BatchNorm running statistics: they are buffers, and every forward in train() mode folds the batch into "
        "them. The trained layers are fitted to batch-normalized features of the frozen part, evaluation "
        "normalizes with drifted statistics, and the frozen part saved is not the pretrained one",
    "ledger.frozen_norm.train_mode.next":
        "put the frozen part in eval() after every model.train() (call eval() on {part} right after it, or "
        "override train() in the model to keep it in eval()); keep it in train() only to adapt its statistics "
        "on purpose",
    "ledger.frozen_norm.cause":
        "eval() is a mode, not a flag that sticks: Module.train() recurses into every submodule, so the "
        "model.train() of each epoch undoes the eval() that froze the layer, and it normalizes with batch "
        "statistics and overwrites its running mean and variance with the new data's",
    "ledger.frozen_norm.next":
        "put the frozen layers back in eval() after every model.train() (override train() in the model, or "
        "call {module}.eval() right after it), or replace them by frozen normalization layers",
    "ledger.best_checkpoint_regressed.cause.unguarded":
        "the running best {record} is set from {metric} at line {record_line} after every evaluation, outside the "
        "branch that saves: each save compares {metric} with the previous evaluation's value, not with the best so "
        "far, so an evaluation that beats only its predecessor overwrites the best checkpoint with a worse one",
    "ledger.best_checkpoint_on_training_loss":
        "the best checkpoint {file} is chosen on {metric}, which at each of its {writes} writes equals the loss of the "
        "training batch just trained on, while the run evaluated the model ({evaluations} evaluation forwards): "
        "the file kept as the best is the one whose last training batch fit best, not the one that scored best on "
        "held-out data (a model that overfits keeps being saved)",
    "ledger.best_checkpoint_on_training_loss.no_evaluation":
        "the best checkpoint {file} is chosen on {metric}, which at each of its {writes} writes equals the loss of the "
        "training batch just trained on: one training batch's loss picks the model, not a held-out score",
    "ledger.best_checkpoint_on_training_loss.cause":
        "the score the best-checkpoint decision compares is read from the training step's output (the engine's last "
        "output, the last batch's loss) instead of from the validation pass: it measures how well one training batch "
        "is fit, it is noisy and it keeps falling as the model overfits",
    "ledger.best_checkpoint_on_training_loss.next":
        "score the best checkpoint on the validation result (attach the handler to the validator / evaluator, or "
        "compare the validation loss or metric of that epoch); print the score compared at each save next to the "
        "validation loss",
}
