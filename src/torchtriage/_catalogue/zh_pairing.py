"""密集目标与输入不对齐的消息（中文）。"""

MESSAGES = {
    "data.target_misaligned": "{n} 个样本中有 {samples} 个的密集目标（掩码 / 图）与输入图像不对齐：经过{transform}移动后，它对输入像素的解释明显优于原样，说明几何增强只作用于图像而没有作用于标签（或相反）",
    "data.target_misaligned.cause": "翻转、旋转、平移或裁剪只作用在了输入上（增强只传了 image=... 而没有传 mask=...，或两者用了各自独立的随机抽样）：标签与像素不再对齐，模型在错位的标签上训练。",
    "data.target_misaligned.next": "在同一次调用中对图像和掩码做相同的几何变换（albumentations：transform(image=img, mask=mask)；torchvision v2：把两者传给同一个变换），只把光度变换（颜色、模糊、噪声）单独用于图像。把一张增强后的图像与其掩码叠加画出来检查。",
}
