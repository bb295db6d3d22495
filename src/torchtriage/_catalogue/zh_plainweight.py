"""中文：以普通张量保存的权重（第 12 轮，`_ledger_step/_plainweights.py`）。"""

MESSAGES = {
    "ledger.plain_weight.gate":
        "{cls} 的 {count} 个张量（{names}；{first} 等）在前向中作为乘数使用，却是普通张量而非 nn.Parameter："
        "它们得不到梯度，始终恰好等于 {value}（{values} 个值，形状 {shape}）",
    "ledger.plain_weight.gate.cause":
        "作为模块属性赋值、未包成 nn.Parameter 的张量不在 parameters() 中：优化器看不到它，"
        "本应从 {value} 开始学习的权重永远停在那里，它所乘的项（{ops}）学不到任何东西",
    "ledger.plain_weight.constant.cause":
        "作为模块属性赋值、既非 nn.Parameter 也未 register_buffer 的张量不在 parameters() 和 state_dict() 中："
        "若是固定常量没有问题，若是应当学习的权重则永远不变",
    "ledger.plain_weight.constant":
        "{cls} 的 {count} 个普通张量属性（{first}，形状 {shape}）在前向中作为乘数（{ops}）；它们不是参数，从不训练",
    "ledger.plain_weight.next":
        "在 __init__ 中用 nn.Parameter(...) 创建（这样它在 model.parameters() 中并被训练）；"
        "若是常量，用 register_buffer(...)",
}
