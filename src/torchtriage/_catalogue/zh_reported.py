"""第 12 轮关于损失项权重和所报告指标的检查的消息（中文）。"""

MESSAGES = {
    "silent.loss_term_divided_twice": "一个损失项被批大小（{batch}）除了 {times} 次，而它只在批维度上归约了 {reduced} 次（第 {lines} 行）：它以代码所给权重的 1/{factor} 进入损失（{value}，本应为 {intended}，总损失 {loss}）",
    "silent.loss_term_divided_twice.cause": "该项已经是批上的均值（`mean`、损失函数默认的归约，或除以批大小的求和），又被批大小除了一次：它流向每个共享参数的梯度小了同样的倍数，写在它旁边的权重也不再是它字面的意思。",
    "silent.loss_term_divided_twice.next": "像其他项一样只除以一次批大小（去掉多余的 `/ batch_size`，或在相除之前求和而不是取均值）。",
}
