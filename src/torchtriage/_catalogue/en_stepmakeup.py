"""English: what one optimizer step is made of (micro-batches, batches, averaged copies)."""

MESSAGES = {
    "dynamics.clip_partial_accumulation":
        "clip_grad_norm_ runs between the backward() calls of one optimizer step ({clips} clip(s) on partial sums "
        "of {backwards} accumulated micro-batches): each partial sum is rescaled before the next micro-batch is "
        "added, so the first micro-batch enters the update at {weight}× the weight of the last",
    "dynamics.clip_partial_accumulation.cause":
        "with gradient accumulation .grad holds a partial sum until the last micro-batch's backward; clipping it "
        "there (a clip after every backward, or one not guarded by accelerator.sync_gradients) shrinks the earlier "
        "micro-batches' gradients, and the step applies neither the sum nor its clipped version",
    "dynamics.clip_partial_accumulation.cause.quiet":
        "with gradient accumulation .grad holds a partial sum until the last micro-batch's backward; clipping it "
        "there rescales the earlier micro-batches whenever the partial norm exceeds max_norm (it did not, in the "
        "steps measured)",
    "dynamics.clip_partial_accumulation.next":
        "clip once per optimizer step, after the last micro-batch's backward: `if accelerator.sync_gradients:` "
        "(accelerate) or `if (i + 1) % accumulation_steps == 0:` around clip_grad_norm_ and optimizer.step()",
    "ledger.after_loop.message":
        "the batch loop over {loader} only loads its batches: in {passes} passes no forward, backward or step ran while "
        "the loop delivered {batches} batches, then {steps} optimizer step(s) ran on the last batch alone; {lost} of "
        "{samples} samples loaded ({share}) never reached a step",
    "ledger.after_loop.cause":
        "the forward, backward and optimizer.step() sit after the batch loop ({loop}), not inside it (an indentation "
        "slip): the loop variable keeps the last batch, and every other batch is fetched and thrown away",
    "ledger.after_loop.next":
        "indent the forward, loss.backward() and optimizer.step() (and zero_grad) into the batch loop; keep a "
        "per-epoch scheduler.step() in the epoch loop",
    "silent.ema_updated_between_steps":
        "the averaged copy {copy} is updated more often than the optimizer steps: {update}() ran {calls} times for "
        "{steps} optimizer steps ({per} per step); {idle} of the calls came with no optimizer step since the previous one",
    "silent.ema_updated_between_steps.cause":
        "the update sits in the micro-batch loop (after `with accelerator.accumulate(...)`, or beside a step taken "
        "every k backward calls) rather than after the optimizer step: it blends toward parameters that have not moved, "
        "and every count it keeps in calls (step counter, decay warm-up, update_every, update_after_step) runs ahead",
    "silent.ema_updated_between_steps.next":
        "update the copy only when the optimizer stepped: `if accelerator.sync_gradients:` (accelerate) or inside "
        "the `if (i + 1) % accumulation_steps == 0:` block that calls optimizer.step()",
}
