"""Messages of the loss target whose rows were overwritten with random noise (English)."""

MESSAGES = {
    "silent.target_overwritten_with_noise": "{rows} of {n} rows of this loss's target were overwritten in place with random noise ({op}) before the model call: the clean target of those rows is gone and the model is trained to output noise",
    "silent.target_overwritten_with_noise.cause": "a corruption meant for the input (condition dropout, noising, masking) was written in place into the batch tensor that is also the loss target: the same tensor serves as the clean label and as the corrupted input.",
    "silent.target_overwritten_with_noise.next": "Keep a copy of the clean target before corrupting (target = x.clone()), or corrupt a copy (x_in = x.clone(); x_in[i] = noise), and pass the untouched tensor to the loss.",
}
