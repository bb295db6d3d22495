"""English: the data ledger's normalisation statistics (session 11): scaled with held-out rows."""

MESSAGES = {
    "ledger.scaled_with_heldout.message": "the inputs of loader {train} ({train_where}) were normalised with statistics that include the held-out rows: its {m} distinct rows together with the {held} rows of {held_loaders} are standardized to mean 0 / std 1 ({how}), while the training rows alone have mean {tmean} and std {tstd}: the mean and std were computed over all {n} rows before the split",
    "ledger.scaled_with_heldout.cause": "mean and std were taken over the whole data (validation and test rows included) and only then was it split, so the held-out rows set the scale and offset of every training input: test information leaks into training and model selection, and the training inputs are not standardized",
    "ledger.scaled_with_heldout.next": "split first, compute the mean and std (fit the scaler) on the training rows only, and apply those same statistics to the validation and test rows",
}
MESSAGES["ledger.stored_mean_with_heldout.message"] = "the mean vector '{attr}' with which the dataset of loader {train} ({train_where}) normalizes its {m} raw rows is not their mean: it is their mean moved {share} of the way toward the mean of the {held} held-out rows of {eval} ({eval_where}), in every feature (up to {shift} training standard deviations): the normalization statistics were computed over training and held-out rows together"
