"""中文：统计了训练所排除的目标位置的指标（`_dynamics/_ignored.py`）。"""

MESSAGES = {
    "silent.metric_counts_ignored":
        "由 ({op}) 计算的指标统计了 {n} 个目标位置中 {ignored} 个（{share}）{kind}的位置（{what}）："
        "其值为 {computed}，仅改变这些位置时变为 {moved}；预测在保留位置上的匹配率为 {rate_kept}，而在全部位置上为 {rate_all}",
    "silent.metric_counts_ignored.cause_loss":
        "损失会跳过等于 {what} 的目标，但比较覆盖了每个位置，分母也计入了它们（numel）：预测永远不会等于 {what} 的值，"
        "所以每个被忽略的位置都算作错误，即使完美的模型也只能得到真实目标所占的比例",
    "silent.metric_counts_ignored.cause_pad":
        "目标以填充结尾（模型嵌入层的 {what}），而指标比较并统计了这些位置：模型很容易预测出填充，"
        "因此这个数值主要反映每行中填充所占的比例，而不是真实 token 的预测质量",
    "silent.metric_counts_ignored.next":
        "只在保留的位置上计算指标：keep = target != 被忽略的值；correct = ((pred == target) & keep).sum()；total = keep.sum()",
    "silent.metric_counts_ignored.kind_loss": "被损失忽略",
    "silent.metric_counts_ignored.kind_pad": "行尾填充",
}
