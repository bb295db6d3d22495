"""CutMix 标签权重不等于保留像素比例的消息（中文）。"""

MESSAGES = {
    "silent.mix_weight_not_pixel_share": "混合标签给样本自身标签的权重是 {weight}，但粘贴的框给它留下了 {kept} 的像素（差 {gap}）：标签混合与 CutMix 输入的像素比例不一致",
    "silent.mix_weight_not_pixel_share.cause": "lam 是采样得到的混合比例，但实际粘贴的框更小：在图像边界被裁剪（或取整到整像素），软标签声称的另一样本的占比多于输入中实际的占比。",
    "silent.mix_weight_not_pixel_share.next": "粘贴之后按裁剪后的框重新计算权重：lam = 1 - (x2 - x1) * (y2 - y1) / (W * H)，并在损失中使用这个 lam。",
}
