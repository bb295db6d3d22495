"""English: where every held-out sample goes (session 12): evaluated whole, in one role, on one
side of the split."""

MESSAGES = {
    "ledger.eval_lost_fixed.message": "evaluation loader {loader} ({where}) leaves the same {lost} of its {samples} samples ({share}, rows {rows}) out of every one of its {passes} pass(es): the metric is computed on {kept} samples chosen by their position, not on the split it names",
    "ledger.eval_lost_fixed.cause": "drop_last=True on an evaluation loader whose sampler does not shuffle drops the final partial batch, the same samples at the end of the split every pass; a split ordered by time, class or file loses a whole stretch of it",
    "ledger.eval_lost_fixed.next": "build evaluation loaders with drop_last=False (drop the last partial batch for training loaders only: drop_last=train)",
    "ledger.role_train.message": "loader {loader} ({where}) trains on the same {rows} rows that {train} trains on, while {never} of the dataset's {n} rows (e.g. {examples}) are never loaded by any loader: the held-out rows are never used and the training rows are fitted twice",
    "ledger.role_eval.message": "loader {loader} ({where}) evaluates the same {rows} rows that {train} trains on, while {never} of the dataset's {n} rows (e.g. {examples}) are never loaded by any loader: the held-out metric is measured on training rows",
    "ledger.role_sampler.cause": "the loader was given the training split's sampler: the index sampler '{sampler}' built over the held-out rows was never given to any DataLoader",
    "ledger.role_sampler.next": "give this DataLoader the held-out split's sampler (sampler={sampler}), so that each split's rows go to one role",
    "ledger.role_name.cause": "the loader named for the {role} split draws the training split's rows (its sampler or index list is the training one), so the rows held out are never loaded",
    "ledger.role_name.next": "build this loader over the held-out rows (its own sampler or Subset), so that each split's rows go to one role",
}
