"""中文：内存中保存的“最佳”，其记录从不更新，或它就是正在训练的模型本身。"""

MESSAGES = {
    "bestrecord.never_updated":
        "每当 {score} 优于 {record} 时就取 {kept}，但循环中从未更新 {record}（它一直是 {value}，在第 {init} 行设定）："
        "在 {evals} 次评估中，保存下来的是最后一次通过比较的那一次，第 {last_step} 步得分 {last}，"
        "而第 {best_step} 步曾得到 {best}（{worse} 次被更差的分数替换）",
    "bestrecord.never_updated.cause":
        "第 {guard} 行的比较只有在记录跟随所保存对象时才能保留最佳；分支中没有 {record} = {score}，"
        "每次优于初始值的评估都会替换它",
    "bestrecord.never_updated.next":
        "在取最佳的地方同时更新记录：在 {kept} = ... 旁边写 {record} = {score}",
    "bestrecord.kept_alias":
        "{kept} 保存的是正在训练的模型的引用，而不是副本：它在第 {step} 步被选中（{record} {score}），"
        "之后 {rejected} 次评估得分更差而被拒绝，但优化器此后又写入了其参数 {writes} 次，"
        "因此循环结束后 {kept} 持有的是第 {now} 步的模型",
    "bestrecord.kept_alias.cause":
        "把模块（或它的 state_dict()）赋给另一个名字只是让两个名字指向同一组参数；最佳轮次之后优化器仍在更新它们",
    "bestrecord.kept_alias.next":
        "保存快照：{kept} = copy.deepcopy(model)（或 copy.deepcopy(model.state_dict())，循环结束后再加载）",
    "bestrecord.on_test":
        "模型按 {score} 选择，它在 {evals} 次评估中都是在 {loader} 上计算的，而 {function} 的选择循环结束后评估的测试集"
        "正是这些样本：被保留的轮次在第 {step} 步得分 {picked}，最后一轮为 {last}，因此报告的测试结果是它自己挑出的最好轮次",
    "bestrecord.on_test.cause":
        "在随后要报告的划分上选择轮次（或提前停止）会让选择贴合这些样本；报告的测试结果偏乐观",
    "bestrecord.on_test.next":
        "从训练数据中留出验证集，在验证集上选择轮次，最后只在测试集上评估一次",
}
