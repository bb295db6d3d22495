"""English: checkpoints read back into the run (resume state reset, parameters frozen again)."""

MESSAGES = {
    "ckpt.resume_reset.counter":
        "the run resumed from {file} with '{key}' = {restored}, then wrote '{key}' = {written} into the same "
        "checkpoint layout: the resumed loop restarted its counter and trains again the epochs it had already trained",
    "ckpt.resume_reset.best":
        "the run resumed from {file} with '{key}' = {restored}, then wrote '{key}' = {written} into the same "
        "checkpoint layout, and its best score went back ({best}): the resumed loop restarted its counter and its "
        "best value, so a worse model was saved as the best",
    "ckpt.resume_reset.cause":
        "the values read from the checkpoint (start epoch, best score) are overwritten by their initial values "
        "after the resume block, or the loop does not start from the restored epoch (range(num_epochs) instead of "
        "range(start_epoch, num_epochs)); the epoch-driven learning-rate schedule starts over too",
    "ckpt.resume_reset.next":
        "initialise start_epoch and the best score before the resume block, not after it, and loop from "
        "start_epoch",
    "ckpt.refrozen":
        "{count} parameters (e.g. '{first}', {values} values) had {optimizer} state restored from a checkpoint "
        "(they were being trained when it was written), but the resumed run kept them frozen (requires_grad=False) "
        "and never changed them in {steps} optimizer steps after the restore, while the optimizer's other "
        "parameters trained",
    "ckpt.refrozen.cause":
        "the resume re-ran the freezing done at the start of training (a fine-tuning callback's "
        "freeze_before_training, a freeze in setup) but the unfreeze only happens at one epoch, which the resumed "
        "run has already passed",
    "ckpt.refrozen.next":
        "on resume, unfreeze every module whose unfreeze epoch is already past (e.g. when current_epoch >= "
        "unfreeze_at_epoch), or save and restore requires_grad with the checkpoint",
}
