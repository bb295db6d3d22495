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
    "ckpt.name_swapped":
        "{count} checkpoint files are named with swapped values: in '{example}' the number after '{a}' is "
        "{ta}, the value of '{b}', and the number after '{b}' is {tb}, the value of '{a}'; a checkpoint chosen by "
        "its name is chosen on the wrong metric",
    "ckpt.name_swapped.cause":
        "the format string's placeholders are filled in another order than its labels "
        "('{a}_{{}}_{b}_{{}}'.format({b}, {a}))",
    "ckpt.name_swapped.next":
        "use named placeholders ('{a}_{{{a}}}_{b}_{{{b}}}' or an f-string) so each value sits after its own label",
    "ckpt.test_not_best":
        "the evaluation after training runs on the weights of the last step ({final}), not on the best model the "
        "loop saved at {saved} (its last write was at step {best}): no load_state_dict ran before this test, and "
        "the {rejected} validations after that write were not saved, each worse than the best",
    "ckpt.test_not_best.cause":
        "the loop keeps the best model in a checkpoint file, but the model object keeps training after it; the "
        "test after training uses the model in memory (the last epoch's), which the loop's own comparison "
        "rejected",
    "ckpt.test_not_best.next":
        "load the best checkpoint into the model (model.load_state_dict(torch.load(best_path)[...])) before "
        "the final evaluation, or say in the report that the last model is tested",
}
