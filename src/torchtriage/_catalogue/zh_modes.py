"""评估中的随机性消息（issue 26 第 5 项，模式）。"""

MESSAGES = {
    "modes.eval_random":
        "处于 eval() 模式的 {model} 在前向中执行随机操作：{count} 个模块，首个为 {first}；同一批数据评估两次会得到不同输出",
    "modes.eval_random.cause":
        "eval() 会关闭 nn.Dropout 并让 BatchNorm 使用运行统计量，但前向中抽取随机数的操作（torch.randn、bernoulli、"
        "以 training=True 调用或被切回 train() 的 dropout）仍然会抽取：评估指标因此每次运行都不同",
    "modes.eval_random.next":
        "如果采样是有意的（VAE 的采样、MC dropout），传入 torch.Generator 使其可复现；否则在 eval() 模式下返回确定值"
        "（if self.training: ...），并让 dropout 模块保持 eval()",
    "modes.eval_bn_updates":
        "{model} 处于 eval() 模式，但其中 {count} 个 BatchNorm 模块（{first} 等）处于 train() 模式：评估前向改变了它们的运行统计量",
    "modes.eval_bn_updates.training":
        "{model} 处于 eval() 模式，但其中 {count} 个 BatchNorm 模块（{first} 等）在一次前向中以 train() 模式运行，"
        "而该前向的输出参与了训练步（在它下一次前向之前执行了 backward）：有意使用批内统计量（动量键编码器、EMA 教师），"
        "没有评估结果用到它们",
    "modes.eval_bn_updates.training.next":
        "如果有意使用批内统计量则无需改动；评估该模型时，也要把其中的 BatchNorm 切到 eval()",
    "modes.eval_bn_updates.cause":
        "train() 模式的 BatchNorm 用批内统计量归一化，并把它们并入运行均值与方差，于是评估数据会影响之后的每一次前向，"
        "评估输出也取决于它所在的批次",
    "modes.eval_bn_updates.next":
        "不要在 model.eval() 之后把 BatchNorm 模块切回 train()（对子模块调用 .train() 的循环、在 eval() 之后才构建的模块）；"
        "在评估之前调用 model.eval()",
}
