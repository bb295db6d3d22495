"""English: a best kept in memory whose record never moves, or that is the live model itself."""

MESSAGES = {
    "bestrecord.never_updated":
        "{kept} is taken whenever {score} beats {record}, but {record} is never updated in the loop (it stays "
        "{value}, set at line {init}): over {evals} evaluations the kept one is the last that passed, scoring {last} "
        "at step {last_step}, while {best} was seen at step {best_step} ({worse} replacements by a worse score)",
    "bestrecord.never_updated.cause":
        "the comparison at line {guard} keeps the best only if the record follows the kept one; without "
        "{record} = {score} in its branch every evaluation better than the initial value replaces it",
    "bestrecord.never_updated.next":
        "assign the record where the best is taken: {record} = {score} next to {kept} = ...",
    "bestrecord.kept_alias":
        "{kept} keeps a reference to the model being trained, not a copy: it was chosen at step {step} ({record} "
        "{score}), {rejected} later evaluation(s) scored worse and were rejected, yet the optimizer has written "
        "its parameters {writes} times since, so what {kept} holds after the loop is the model of step {now}",
    "bestrecord.kept_alias.cause":
        "assigning a module (or its state_dict()) binds a second name to the same parameters; the optimizer "
        "keeps updating them after the best epoch",
    "bestrecord.kept_alias.next":
        "keep a snapshot: {kept} = copy.deepcopy(model) (or copy.deepcopy(model.state_dict()) and load it after the loop)",
    "bestrecord.on_test":
        "the model is chosen on {score}, computed over {loader} at each of {evals} evaluations, and the test split "
        "evaluated after the selection loop of {function} holds the same samples: the kept epoch scored {picked} at step "
        "{step} against {last} for the last one, so the test figure reported is the best of the epochs it picked itself",
    "bestrecord.on_test.cause":
        "selecting the epoch (or early stopping) on the split that is then reported fits the choice to those rows; "
        "the reported test result is optimistically biased",
    "bestrecord.on_test.next":
        "hold out a validation split from the training data, choose the epoch on it, and evaluate the test split once at the end",
}
