"""密集目标与输入不对齐的消息（中文）。"""

MESSAGES = {
    "data.target_misaligned": "{n} 个样本中有 {samples} 个的密集目标（掩码 / 图）与输入图像不对齐：经过{transform}移动后，它对输入像素的解释明显优于原样，说明几何增强只作用于图像而没有作用于标签（或相反）",
    "data.target_misaligned.cause": "翻转、旋转、平移或裁剪只作用在了输入上（增强只传了 image=... 而没有传 mask=...，或两者用了各自独立的随机抽样）：标签与像素不再对齐，模型在错位的标签上训练。",
    "data.target_misaligned.next": "在同一次调用中对图像和掩码做相同的几何变换（albumentations：transform(image=img, mask=mask)；torchvision v2：把两者传给同一个变换），只把光度变换（颜色、模糊、噪声）单独用于图像。把一张增强后的图像与其掩码叠加画出来检查。",
    "data.target_misaligned.tokens": "{loss} 的目标是输入 token 移动了 {offset} 个位置，而不是 1 个：在 {positions} 个位置中有 {share} 的位置 t 的目标是同一行的第 t + {offset} 个 token，因此标签被移位了两次（数据里一次，损失里又一次），模型没有在下一个 token 上训练",
    "data.target_misaligned.tokens.cause": "数据集或 collator 已经返回移位一个 token 的标签（labels = tokens[1:]），模型的因果语言模型损失又移位了一次（logits[..., :-1, :] 对 labels[..., 1:]）：输出头学到的是 {offset} 个位置之后的 token，尽管训练损失在下降，它的下一个 token 预测毫无用处",
    "data.target_misaligned.tokens.next": "只移位一次：给模型的 labels 等于 input_ids（副本，不移位），由它的损失来移位；或者保留已移位的标签，与未移位的 logits 比较；可用 input_ids[0, 1:5] 与损失看到的标签对照检查",
    "data.target_misaligned.graph_rows": "在 {steps} 个步中，损失监督的 {selected} 行里有 {outside} 行不在该步交给模型的图中：它们不属于该图的任何一条边，而且每一行都是下一步图中的节点，因此损失掩码选中的是下一个时间步的行（共 {nodes} 行）",
    "data.target_misaligned.graph_rows.cause": "选择被监督行的掩码是为下一步计算的（时间索引 t + 1，birth_time <= t + 1），而模型看到的是第 t 步的图：损失拟合了尚未进入图的行（只凭它们的静态输入行），其数值也不是本步节点上的损失",
    "data.target_misaligned.graph_rows.next": "用与交给模型的图相同的时间索引选择行（第 t 个快照用 birth_time <= t）；检查 mask.sum() 是否等于本步边所涉及的节点数",
}
