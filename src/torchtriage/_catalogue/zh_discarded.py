"""中文：梯度在任何优化器步骤使用之前就被清零的反向传播。"""

MESSAGES = {
    "ledger.discarded":
        "{backward} 处的 {total} 次反向传播中有 {discarded} 次的梯度在任何优化器步骤使用之前就被 zero_grad"
        "（{reset}）清除，另外 {applied} 次被使用：这些批次的梯度被计算后又被丢弃，从未起作用",
    "ledger.discarded.cause":
        "zero_grad() 在每次 backward() 之前运行，而 step() 只在若干次反向传播后才运行，因此每一步只看到最后一次"
        "反向传播的梯度：梯度累积只保留了一个微批次，丢弃了其余的",
    "ledger.discarded.next":
        "在 optimizer.step() 之后（在同一个执行 step 的 `if` 里）调用 zero_grad()，而不是在每次 backward() 之前，"
        "这样累积的各批次梯度才会相加",
}
