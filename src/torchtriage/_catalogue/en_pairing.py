"""Messages of the dense target that does not line up with its input (English)."""

MESSAGES = {
    "data.target_misaligned": "the dense target (mask / map) of {samples} of {n} samples does not line up with its input image: moved by a {transform}, it explains the input's pixels clearly better than as given, so a geometric augmentation was applied to the image but not to its label (or the reverse)",
    "data.target_misaligned.cause": "a flip, rotation, shift or crop was applied to the input only (an augmentation called with image=... and not mask=..., or with two independent random draws): the label no longer lines up with the pixels and the model is trained on misaligned labels.",
    "data.target_misaligned.next": "Apply the same geometric transform to the image and its mask in one call (albumentations: transform(image=img, mask=mask); torchvision v2: pass both to one transform), and keep only photometric transforms (color, blur, noise) on the image alone. Plot one augmented image with its mask overlaid to check.",
    "data.target_misaligned.tokens": "{loss} targets are the input tokens moved by {offset} positions, not 1: at {share} of {positions} positions the target of position t is token t + {offset} of the same row, so the labels were shifted twice (by the data and again by the loss) and the model is not trained on the next token",
    "data.target_misaligned.tokens.cause": "the dataset or collator already returns labels shifted by one token (labels = tokens[1:]) and the model's causal-LM loss shifts them again (logits[..., :-1, :] against labels[..., 1:]): the head learns the token {offset} ahead, its next-token predictions are useless although the training loss falls",
    "data.target_misaligned.tokens.next": "shift once: give the model labels equal to input_ids (a copy, not offset) and let its loss shift them, or keep the shifted labels and compare them with the unshifted logits; check with input_ids[0, 1:5] against the labels the loss sees",
}
