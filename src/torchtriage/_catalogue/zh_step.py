"""中文：步骤记录与参数索引（issue 11）。"""

MESSAGES = {
    "gradients.unreached.message.raw":
        "{parameter} 由优化器持有，但没有从任何损失得到梯度",
    "gradients.unreached.cause.raw":
        "{parameter} 没有用在通往损失的计算中，或者它的值被一个没有历史的副本替换了"
        "（从数据重建的张量、torch.tensor(...)、requires_grad=False 创建的张量）",
    "gradients.unreached.next.raw":
        "从优化器到损失跟踪 {parameter}：每次使用都必须是对它本身的张量运算，而不是对副本",
    "gradients.leaf_not_registered.message.outside":
        "损失依赖一个 requires_grad=True 的张量 {shape}，但没有优化器持有它（{line}）",
    "gradients.leaf_not_registered.cause.outside":
        "每次 backward 它都会得到 .grad，但没有优化器更新它：如果你需要读取输入的梯度"
        "（显著图、对抗样本）这没有问题，否则是浪费",
    "gradients.leaf_not_registered.next.outside":
        "如果它应当被训练，把它交给优化器；否则用 requires_grad=False 创建它",
    "gradients.cut_no_grad.message.raw":
        "{count} 个参数（{parameter} 等）没有梯度：它们在 {mode} 下被使用（{line}）",
    "nonfinite.why.no_record": "没有这一步的记录（没有模型调用，也没有记录的运算）",
    "nonfinite.why.not_taped": "这一步没有记录模型之外的运算（记录只在最初几步开启）；接下来的几步已开启记录",
    "nonfinite.why.truncated": "这一步在模型之外运行的运算超过了记录上限",
    "nonfinite.why.replay_finite": "用相同的输入和随机数状态重放了整个步骤，结果是有限值：这一步不确定，或读取了未能恢复的状态",
    "nonfinite.backward_code":
        "前向计算是有限值，但梯度不是：在模型之外 {line} 处写的 {op} 的反向传播首先产生了 {kind}（第 {step} 步）",
    "nonfinite.module_of": "{model} 的 {module}",
    "repro.shrink.invalid": "无效（候选破坏了这一步）",
    "repro.shrink.unsliced": "批次的每一半都破坏了这一步而不是消除问题：这一步有一个张量没有随批次一起切片：{tensors}；重放看到：{seen}",
    "repro.shrink.unrecorded": "包中没有的张量（由脚本自己构造的目标或掩码）",
    "gradients.leaf_not_registered.message.grows":
        "损失依赖一个 requires_grad=True 的张量 {shape}，没有优化器持有它，而且它的 .grad 不断累积（{line}）",
    "gradients.leaf_not_registered.cause.grows":
        "每次 backward 都累加到它的 .grad 上，没有任何地方清零或使用它：数值在各步之间累积（占用内存，之后读取时梯度也是错的）",
    "gradients.leaf_not_registered.next.grows":
        "如果它应当被训练，把它交给优化器；否则用 requires_grad=False 创建它，或每步清零它的 .grad",
    # factory replay of the whole step (the bundle's step program)
    "repro.step.models":
        "失败的这一步调用了多个模型（{labels}）：工厂函数必须全部返回，"
        "形如 {{'models': {{标签: 模型, ...}}, 'optimizers': [...]}}，标签与 bundle 中的名称一致",
    "repro.step.missing_models":
        "bundle 中的这一步调用了 {labels}；工厂函数给出的是 {given}（缺少：{missing}）",
    "repro.note.step_left_out":
        "注意：以下运算未存入 bundle（改为存储其结果）：{ops}",
}
