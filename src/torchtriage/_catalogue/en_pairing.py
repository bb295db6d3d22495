"""Messages of the dense target that does not line up with its input (English)."""

MESSAGES = {
    "data.target_misaligned": "the dense target (mask / map) of {samples} of {n} samples does not line up with its input image: moved by a {transform}, it explains the input's pixels clearly better than as given, so a geometric augmentation was applied to the image but not to its label (or the reverse)",
    "data.target_misaligned.cause": "a flip, rotation, shift or crop was applied to the input only (an augmentation called with image=... and not mask=..., or with two independent random draws): the label no longer lines up with the pixels and the model is trained on misaligned labels.",
    "data.target_misaligned.next": "Apply the same geometric transform to the image and its mask in one call (albumentations: transform(image=img, mask=mask); torchvision v2: pass both to one transform), and keep only photometric transforms (color, blur, noise) on the image alone. Plot one augmented image with its mask overlaid to check.",
}
