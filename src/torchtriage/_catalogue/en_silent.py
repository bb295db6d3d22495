"""English: silent bugs (computations that run and are wrong) and the `lab` command."""

MESSAGES = {
    "silent.channels_last_reshaped": "the input of {conv} {shape} is channels-last data reshaped into {c} channels: read back as {last_shape} it is far smoother (neighbour roughness {last} instead of {given}), so each 'channel' plane is a strip of the data with its channels interleaved",
    "silent.channels_last_reshaped.cause": "a (N, H, W, C) tensor was turned into (N, C, H, W) with reshape/view, which keeps the element order, instead of permute, which moves the channel axis: nothing raises because the element count matches, and the model trains on scrambled pictures",
    "silent.channels_last_reshaped.next": "move the channel axis with x.{perm} (then .contiguous() or .reshape if needed) before any reshape that merges other axes; check by plotting x[0] as an image",
    "silent.loss_broadcast": "prediction {pred} and target {target} broadcast to {result} in {op}: every prediction is compared with every target",
    "silent.loss_broadcast.paired": "prediction {pred} and target {target} broadcast to {result} in {op}: both keep their batch axis of {n} samples, at two different places, so each prediction is scored against all {n} targets of the batch (pairwise over the batch)",
    "silent.loss_broadcast.select": "masked_select's input {pred} and mask {target} broadcast to {result}: every element of the input is selected once per True of the mask, so the mask drops nothing (padded positions are averaged in with the real ones)",
    "silent.loss_broadcast.cause": "the two shapes differ by an axis of size 1 (a missing squeeze, or an unsqueeze on one side), so broadcasting builds an outer product over the samples instead of pairing sample i with target i",
    "silent.loss_broadcast.next": "make both shapes equal on the sample axis (e.g. prediction.squeeze(-1) or target.unsqueeze(-1)); avoid a bare squeeze() that also drops a batch axis of size 1",
    "silent.probabilities_to_cross_entropy": "{loss} received probabilities ({producer} output), but it applies log_softmax itself: softmax is applied twice",
    "silent.probabilities_to_cross_entropy.cause": "inputs lie in [0, 1] and sum to 1 along the class axis; cross_entropy expects raw logits",
    "silent.probabilities_to_cross_entropy.next": "pass the logits (remove the softmax before the loss), or use nll_loss on log_softmax output",
    "silent.targets_not_distributions": "{loss} received probability targets whose rows do not sum to 1 (multi-hot labels?)",
    "silent.targets_not_distributions.cause": "soft targets for cross_entropy must be distributions over classes; several 1s per row describe a multi-label task",
    "silent.targets_not_distributions.next": "for multi-label targets use binary_cross_entropy_with_logits; for single-label targets pass class indices or normalized rows",
    "silent.loss_args_swapped": "{loss} got labels (only 0s and 1s, no graph) as its input and the model's output ({producer}) as its target: the two arguments are swapped",
    "silent.loss_args_swapped.cause": "the loss reads its first argument as scores and its second as what to match; with the labels first, the gradient reaches the model only through the target slot and the loss has a floor the model cannot go below (evidence: loss_floor_per_sample), so it learns slowly or not at all",
    "silent.loss_args_swapped.next": "pass the model's output first and the labels second: criterion(output, target) (for cross_entropy: the logits, not softmax probabilities, and class indices or label rows as the target)",
    "silent.nll_without_log_softmax": "{loss} received inputs that are not log-probabilities",
    "silent.nll_without_log_softmax.cause": "nll_loss only picks -input[target]; without log_softmax first, inputs above 0 or rows whose logsumexp is not 0 make the loss meaningless (and unbounded below)",
    "silent.nll_without_log_softmax.next": "apply log_softmax(dim=1) before nll_loss, or use cross_entropy on the logits",
    "silent.sigmoid_before_logits_loss": "{loss} received probabilities ({producer} output), but it applies sigmoid itself",
    "silent.sigmoid_before_logits_loss.cause": "inputs lie in [0, 1]; sigmoid is applied twice, so predictions can never go below 0.5 in effect and gradients shrink",
    "silent.sigmoid_before_logits_loss.next": "remove the sigmoid before the loss (keep it for inference only), or use binary_cross_entropy on probabilities",
    "silent.class_indices_to_binary_loss": "{loss} received targets outside [0, 1]: class indices given to a binary loss",
    "silent.class_indices_to_binary_loss.cause": "binary losses read each target as a probability of the positive class",
    "silent.class_indices_to_binary_loss.next": "for several classes use cross_entropy with class indices, or one-hot encode the targets (F.one_hot) for multi-label training",
    "silent.regression_on_class_labels": "{loss} compares a {classes}-way output with integer class labels",
    "silent.regression_on_class_labels.cause": "a regression loss on class ids broadcasts one label against all {classes} outputs and treats class 3 as 'closer' to 2 than to 0",
    "silent.regression_on_class_labels.next": "use cross_entropy(logits, labels.long()) for classification",
    "silent.labels_not_shifted": "{loss} targets equal the input tokens at the same positions: labels are not shifted for next-token prediction",
    "silent.labels_not_shifted.cause": "the model is trained to copy the token it already sees; the loss drops fast and nothing is learned",
    "silent.labels_not_shifted.next": "predict token t+1 from position t: logits[:, :-1] against input_ids[:, 1:] (or let a model that shifts internally do it, not both)",
    "silent.pad_in_loss": "PAD tokens ({pad}) are counted in the loss",
    "silent.pad_in_loss.cause": "the targets hold padding positions and neither ignore_index nor a mask removes them, so the model is rewarded for predicting PAD",
    "silent.pad_in_loss.next": "set the PAD targets to -100 (ignore_index) or pass ignore_index=pad_id to the loss",
    "silent.attention_sees_future": "outputs at position {position} changed when only tokens from position {changed_from} on changed: the model sees the future",
    "silent.attention_sees_future.cause": "the attention mask is missing, not causal, or added with the wrong sign / shape",
    "silent.attention_sees_future.next": "pass a causal mask (torch.triu(..., diagonal=1) of -inf, or is_causal=True) to every attention layer",
    "silent.attention_sees_future.cause.site": "later tokens first reach earlier positions at {op} in {module}: its inputs at those positions are the same in both runs, its output there is not (an attention without a causal mask before it, or a softmax / sum / mean over the sequence axis)",
    "silent.attention_sees_future.next.site": "open that line: every score of a later key must be masked before the softmax, and the softmax (or any reduction) must run over the keys of each query (dim=-1), not over the queries or the sequence",
    "silent.padding_leaks": "outputs at real tokens changed when only PAD ({pad}) positions changed: padding leaks into the model",
    "silent.padding_leaks.cause": "the attention (or pooling) does not mask PAD positions",
    "silent.padding_leaks.next": "pass the attention mask / key_padding_mask to every attention layer, and mask PAD before pooling",
    "silent.exp_overflow": "exp input reaches {x_max} in {dtype}, {room} below the overflow limit {limit}",
    "silent.exp_overflow.over": "exp input reaches {x_max} in {dtype}, past the overflow limit {limit}: exp is Inf",
    "silent.exp_overflow.cause": "exp of a large score overflows to Inf and a hand-written softmax then gives Inf/Inf = NaN",
    "silent.exp_overflow.next": "subtract the max first (x - x.amax(dim, keepdim=True)) or use torch.softmax / torch.logsumexp",
    "silent.zero_grad_missing": "gradients accumulate across steps: nothing zeroed them after the optimizer step",
    "silent.zero_grad_missing.cause": "backward() adds into .grad; without optimizer.zero_grad() each step applies the sum of all past gradients",
    "silent.zero_grad_missing.next": "call optimizer.zero_grad() once per step (before backward, or right after optimizer.step())",
    "silent.ema_diverges": "an averaged copy of the parameters ({holder}) moves away from them: each update adds a negative share of (parameter - copy) (coefficient {coeff}, an EMA's is 1 - decay > 0); ||copy - parameter|| of {param} grew from {first} to {last} over {updates} updates measured",
    "silent.ema_diverges.cause": "an EMA / moving-average update must be a convex combination, shadow <- shadow + (1 - decay) * (param - shadow); with the sign flipped (shadow + (1 - decay) * (shadow - param)) the shadow is pushed away from the live weights and grows geometrically, while training itself looks normal",
    "silent.ema_diverges.next": "move the shadow toward the parameters: shadow.lerp_(param, 1 - decay), or shadow.sub_((1 - decay) * (shadow - param))",
    "silent.ema_not_averaging": "an averaged copy of the parameters ({holder}) is no moving average: at each of the {updates} updates measured from step {first} on it moved {coeff} of the way to the live weights (an EMA decay of {decay}, averaging over ~{horizon} steps); ||copy - parameter|| / ||parameter|| of {param} is {rel}",
    "silent.ema_not_averaging.cause": "the EMA's decay is overwritten by the per-step weight: `self.decay = self.get_decay(step)` stores 1 - decay (or the warm-up value) back into the attribute that caps the next step's decay, so the decay collapses toward 0.5 within a few steps and the shadow copies the live weights instead of averaging them",
    "silent.ema_not_averaging.next": "keep the configured decay in its attribute and use the per-step value locally: one_minus_decay = 1 - min(self.decay, (1 + step) / (10 + step)); shadow.sub_(one_minus_decay * (shadow - param))",
    "silent.target_copy_frozen": "the copy {copy} of {model} never moved while {model} trained: ||{copy} - {model}|| grew from {first} to {last} (||{model}|| {norm}) over {readings} readings, whereas its sibling copy {sibling} follows {sibling_model} (soft/hard target update measured); every output of {copy} is that of {model} as it was at the first step",
    "silent.target_copy_frozen.cause": "a target network / averaged copy that is never updated is stale: the update loop moves one copy (target_critic) and forgets the other (target_actor), so the targets it computes come from the initial, untrained network for the whole run",
    "silent.target_copy_frozen.next": "update {copy} toward {model} like {sibling} (soft update: t.lerp_(p, tau) over zip({copy}.parameters(), {model}.parameters())); if the copy is meant to stay fixed (a reference policy), detach it from the update loop explicitly",
    "silent.target_copy_unsynced": "the copy {copy} of {model} was never copied from it: at the first step ||{copy} - {model}|| was {start} (||{model}|| {norm}), an unrelated network, while its sibling copy {sibling} started equal to {sibling_model}; its updates pull it toward {model} by {coeff} per step, so the targets it computes come from that unrelated network until they close the gap",
    "silent.target_copy_unsynced.cause": "a target network is built as a second, independently initialised instance and only the other target gets the initial hard copy (load_state_dict / a copy_ loop); the soft updates then pull it toward its model geometrically, and every early target is computed with a random network",
    "silent.target_copy_unsynced.next": "copy {model} into {copy} when they are built, like {sibling}: {copy}.load_state_dict({model}.state_dict()) (or copy.deepcopy({model}))",
    "silent.ema_buffers_stale": "the averaged copy {copy} is evaluated with its BatchNorm running statistics never updated: its buffers ({buffers}) still hold their initial values ({example} mean {copy_value}) while the live model's moved ({source_value}); the EMA update averages parameters only",
    "silent.ema_buffers_stale.cause": "an EMA loop over parameters() leaves the copy's buffers (running_mean / running_var) at their initial values, so in eval mode the EMA model normalises with statistics no data produced and scores far below the live model",
    "silent.ema_buffers_stale.next": "average (or copy) the buffers too: iterate over state_dict().values() (floating tensors averaged, integer ones copied), as timm's ModelEmaV2 does, or recompute them before evaluating (torch.optim.swa_utils.update_bn)",
    "silent.loss_graph_kept": "loss tensors from earlier steps are kept with their autograd graph",
    "silent.loss_graph_kept.carried": "{name}, carried from one step to the next with its autograd graph, links every step's graph to the previous ones: each backward() runs through all earlier batches",
    "silent.loss_graph_kept.carried.unnamed": "a tensor carried from one step to the next with its autograd graph links every step's graph to the previous ones: each backward() runs through all earlier batches",
    "silent.loss_graph_kept.carried.cause": "the graph reached by backward() grows by one step's worth of nodes every step (retain_graph=True keeps the earlier steps' graphs alive): memory and backward time grow with the step, and gradients flow into batches that were already trained on",
    "silent.loss_graph_kept.carried.next": "detach {name} between steps ({name} = {name}.detach(), or repackage_hidden for a tuple: truncated backpropagation through time) and drop retain_graph=True",
    "silent.loss_graph_kept.carried.next.unnamed": "detach the state carried between steps (h = h.detach()) and drop retain_graph=True",
    "silent.loss_graph_kept.buffer": "the buffer {name} of {cls} carries an autograd graph that chains from step to step: updated in place from the batch statistics outside torch.no_grad(), its grad_fn holds the graphs of the previous {n} steps, all alive at once, and the chain grows with every step",
    "silent.loss_graph_kept.buffer.cause": "a running statistic kept in a buffer (stored_mean[:] = stored_mean * (1 - momentum) + mean * momentum) is computed from tensors of the forward without detach(): the buffer becomes a non-leaf tensor whose graph references its previous value's graph; nothing backpropagates through it, so nothing frees it, and memory grows with the number of steps",
    "silent.loss_graph_kept.buffer.next": "update the buffer under torch.no_grad() (or from mean.detach() / var.detach()), as nn.BatchNorm does with its running_mean and running_var",
    "silent.loss_graph_kept.state": "{name} is carried from one forward call to the next with its autograd graph and no backward in between: the hidden state entering this call holds the graphs of the previous {n} batches, all alive at once",
    "silent.loss_graph_kept.state.cause": "the state a forward returns (an RNN's (h, c) stored on the model or passed back in) is fed to the next batch without detach(), outside torch.no_grad(): every batch's graph hangs off the previous one, memory grows with each batch, and each prediction depends on the state an unrelated previous batch left",
    "silent.loss_graph_kept.state.next": "evaluate under torch.no_grad(), and start each batch from a fresh state (or detach it: state = state.detach()); do not keep the returned state on the model unless it is meant to carry over",
    "silent.loss_graph_kept.cause": "an accumulator like `total += loss` or `losses.append(loss)` holds every step's graph, so memory grows each step; a smaller batch will not fix it",
    "silent.loss_graph_kept.next": "accumulate loss.item() or loss.detach() instead of the loss tensor",
    "silent.loss_graph_kept.outputs": "model outputs of {n} earlier steps are still alive with their autograd graph, and more each step",
    "silent.loss_graph_kept.outputs.cause": "a value computed from the model's output without detach() (a metric such as torch.pow(pred - y, 2) summed into a running tensor, or predictions appended to a list) is kept across steps: each one holds its step's graph and memory grows each step",
    "silent.loss_graph_kept.outputs.next": "detach what the loop keeps (metric(pred.detach(), y), .item(), or .data in a metric's process) so only numbers outlive the step",
    "silent.loss_graph_kept.grad": "backward(create_graph=True) left a .grad with its autograd graph on a tensor that is not a parameter, and {n} earlier steps' graphs are still alive",
    "silent.loss_graph_kept.grad.cause": "the .grad's double-backward graph refers back to the tensor that holds it: a reference cycle through autograd's C++ nodes that Python's garbage collector cannot free, so each step leaks one graph (zero_grad() only resets parameters)",
    "silent.loss_graph_kept.grad.next": "take the gradient with torch.autograd.grad(outputs, inputs, create_graph=True) instead of backward(create_graph=True) and .grad (or set the tensor's .grad = None after use)",
    "silent.eval_mode_while_training": "{model} is trained while in eval() mode",
    "silent.eval_mode_while_training.cause": "dropout is off and batch norm uses its running statistics during training steps",
    "silent.eval_mode_while_training.next": "call model.train() before the training loop (and after each evaluation)",
    "silent.train_mode_while_evaluating": "{model} is evaluated while in train() mode",
    "silent.train_mode_while_evaluating.cause": "dropout stays on and batch norm updates its running statistics with evaluation data, so results change from run to run",
    "silent.train_mode_while_evaluating.next": "call model.eval() before evaluating (torch.no_grad() does not switch the mode)",
    "silent.loss_collapse": "the loss fell to about 0 within {steps} steps",
    "silent.loss_collapse.cause": "a loss this low this fast usually means the target leaked into the input or the labels are trivial",
    "silent.loss_collapse.next": "check that no input feature is the target (or computed from it) and that labels vary",
    "data.target_in_input": "the loss target equals input column {column} of the model",
    "data.target_in_input.cause": "the target leaked into the features, so the model can read the answer",
    "data.target_in_input.next": "drop the target column (and anything derived from it) from the inputs",
    "lab.title": "torchtriage lab: four common faults (a broadcast loss, a cut graph, an exp overflow, a writer "
                 "in both splits), run in memory and diagnosed by torchtriage's checks",
    "lab.broadcast": "broadcast: shape {shape}, MSE={wrong} against aligned MSE={right}   [{code}]",
    "lab.item": "cut graph (item() rebuilt as a tensor): backward broken: {broken}; kept-graph gradient={grad}   [{code}]",
    "lab.exp": "exp overflow: direct exp all finite: {finite}; stable softmax sum={total}   [{code}]",
    "lab.splits": "writer in both splits: writers shared by train and test: {shared}   [{code}]",
    "lab.missing": "{what}: missing: the check {check} is not part of this build",
    "lab.failed": "{what}: the check {check} failed: {error}",
    "lab.nothing": "{what}: the check {check} found nothing",
    "lab.footer": "{found}/4 faults diagnosed; scope: the numeric paths and the group check, not whether a model generalizes",
    "silent.padding_reaches_real":
        "{where} is given its input's padding ({source}), yet setting the padded positions to zero changes its "
        "outputs at the real positions by up to {diff} (outputs up to {scale}): the padded values enter the "
        "statistics of the real ones",
    "silent.padding_reaches_real.cause":
        "a masked reduction over the padded axis uses every position (a mean or std that sums padded frames but "
        "divides by the number of valid ones, an unmasked sum or max): each sequence's result depends on how much "
        "padding its batch needed and what the padding holds, so the same sample is normalised differently in "
        "different batches",
    "silent.padding_reaches_real.next":
        "zero (or exclude) the padded positions before each masked sum, mean or std (x = x.masked_fill(~mask, 0)), "
        "and count the squared deviations of the valid positions only",
    "silent.pad_attended":
        "{where} ({model}) was called on right-padded ids (pad {pad}) without an attention_mask: its outputs at "
        "the real tokens depend on the padding",
    "silent.pad_attended.cause":
        "the model accepts attention_mask but none was passed, so every real token attends to the pad positions: the "
        "same sequence gets different outputs (and embeddings, and losses) depending on how much padding its batch "
        "needed, and what is learned from the padded batches does not hold for a batch padded differently",
    "silent.pad_attended.next":
        "pass the mask of the real tokens at this call (attention_mask=(input_ids != pad_token_id)), the one the "
        "tokenizer returned or the one the code builds for pooling",
    "silent.loss_mask_on_inputs":
        "the mask multiplying the per-token losses keeps {kept} position(s) whose target is padding (the targets are "
        "the inputs shifted by {shift}, the mask is not)",
    "silent.loss_mask_on_inputs.cause":
        "position t of a next-token loss predicts token t + {shift}, so its mask is attention_mask[:, {shift}:]; "
        "attention_mask[:, :-{shift}] keeps, in every right-padded row, the prediction of the first pad token after "
        "the text: its loss (usually large: the model never learned it) is added to the sum while the token count "
        "leaves it out",
    "silent.loss_mask_on_inputs.next":
        "mask the shifted losses with the targets' mask (attention_mask[:, {shift}:]) or set the pad labels to -100 "
        "and let the loss ignore them",
}
