"""中文：一次反向传播的梯度留在另一个优化器的 .grad 中，并被它的 step 应用。"""

MESSAGES = {
    "ledger.spilled":
        "{stepper} 有 {n} 次 step 时 .grad 中仍留着 {backward} 处反向传播的梯度（该梯度已由 {owner} 应用）："
        "它的更新除了自己的损失，还在跟随那个别的损失",
    "ledger.spilled.cause":
        "为 {owner} 做的反向传播也经过这些参数（它的损失经过它们：生成器的损失经过判别器），"
        "而在它们自己的反向传播累加之前，没有任何东西重置它们的 .grad：zero_grad() 放在了它们的 step 之后，"
        "而不是它们的损失之前",
    "ledger.spilled.next":
        "在该优化器（或模型）自己损失的 backward() 之前调用它的 zero_grad()，或在另一个损失经过这些参数时"
        "切断其路径（在那个损失计算时 requires_grad_(False)）",
}
