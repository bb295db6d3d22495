"""Messages of the CutMix label weight that is not the share of pixels kept (English)."""

MESSAGES = {
    "silent.mix_weight_not_pixel_share": "the mixed label weights the sample's own label by {weight}, but the pasted box left it {kept} of its pixels (gap {gap}): the label mix does not match the pixel ratio of the CutMix input",
    "silent.mix_weight_not_pixel_share.cause": "lam is the sampled mixing ratio, but the box actually pasted is smaller: clipped at the image border (or rounded to whole pixels), so the soft label claims more of the other sample than the input holds.",
    "silent.mix_weight_not_pixel_share.next": "After pasting, recompute the weight from the clipped box: lam = 1 - (x2 - x1) * (y2 - y1) / (W * H), and use that lam in the loss.",
}
