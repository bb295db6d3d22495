"""中文：读回到运行中的检查点（恢复状态被重置、参数再次冻结）。"""

MESSAGES = {
    "ckpt.resume_reset.counter":
        "运行从 {file} 恢复时 '{key}' = {restored}，之后却以同样的检查点结构写入 '{key}' = {written}："
        "恢复后的循环重新开始计数，把已经训练过的轮次再训练一遍",
    "ckpt.resume_reset.best":
        "运行从 {file} 恢复时 '{key}' = {restored}，之后却以同样的检查点结构写入 '{key}' = {written}，"
        "最佳分数也倒退了（{best}）：恢复后的循环重置了计数和最佳值，于是一个更差的模型被保存为最佳",
    "ckpt.resume_reset.cause":
        "从检查点读出的值（起始轮次、最佳分数）在恢复代码块之后又被初始值覆盖，或者循环没有从恢复的轮次开始"
        "（range(num_epochs) 而不是 range(start_epoch, num_epochs)）；按轮次调整的学习率计划也从头开始",
    "ckpt.resume_reset.next":
        "在恢复代码块之前（而不是之后）初始化 start_epoch 和最佳分数，并让循环从 start_epoch 开始",
    "ckpt.refrozen":
        "{count} 个参数（如 '{first}'，{values} 个值）从检查点恢复了 {optimizer} 状态（写入检查点时它们正在训练），"
        "但恢复后的运行让它们保持冻结（requires_grad=False），恢复后的 {steps} 次优化器更新中从未改变，"
        "而优化器的其他参数在训练",
    "ckpt.refrozen.cause":
        "恢复时重新执行了训练开始时的冻结（微调回调的 freeze_before_training、setup 中的冻结），"
        "而解冻只在某一个轮次发生，恢复后的运行已经过了那个轮次",
    "ckpt.refrozen.next":
        "恢复时解冻所有解冻轮次已过的模块（例如 current_epoch >= unfreeze_at_epoch 时），"
        "或者随检查点保存并恢复 requires_grad",
    "ckpt.name_swapped":
        "{count} 个检查点文件名中的数值被交换：在 '{example}' 中，'{a}' 后面的数字是 {ta}，即 '{b}' 的值，"
        "而 '{b}' 后面的数字是 {tb}，即 '{a}' 的值；按文件名挑选的检查点是按错误的指标挑选的",
    "ckpt.name_swapped.cause":
        "格式字符串的占位符填入顺序与标签顺序不同（'{a}_{{}}_{b}_{{}}'.format({b}, {a})）",
    "ckpt.name_swapped.next":
        "使用具名占位符（'{a}_{{{a}}}_{b}_{{{b}}}' 或 f-string），让每个值紧跟在自己的标签后面",
    "ckpt.test_not_best":
        "训练后的评估用的是最后一步（{final}）的权重，而不是循环在 {saved} 保存的最佳模型（最后一次写入在第 {best} 步）："
        "测试前没有运行 load_state_dict，而那次写入之后的 {rejected} 次验证都没有被保存，每一次都比最佳更差",
    "ckpt.test_not_best.cause":
        "循环把最佳模型保存在检查点文件中，但模型对象在那之后继续训练；训练后的测试使用内存中的模型"
        "（最后一轮的），而循环自己的比较已经否决了它",
    "ckpt.test_not_best.next":
        "在最终评估之前把最佳检查点载入模型（model.load_state_dict(torch.load(best_path)[...])），"
        "或在报告中说明测试的是最后的模型",
}
