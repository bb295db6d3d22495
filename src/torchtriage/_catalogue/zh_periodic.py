"""中文：周期性的学习率调整，其条件从不成立。"""

MESSAGES = {
    "dynamics.lr_decay_never_due":
        "学习率从未改变：调整学习率的分支 `if {test}:` 从未执行，尽管其周期判断所取模的量 `{dividend}` 从 {low} 变到 {high}，"
        "经过了 {divisor} 的 {due} 个倍数；该判断在 {evals} 步中（起点之后）只成立 {held} 次，学习率在整个运行中一直是 {lr}",
    "dynamics.lr_decay_never_due.target":
        "学习率从未改变：调整学习率的分支 `if {test}:` 从未执行，尽管 `{dividend}` 从 {low} 变到 {high}，经过了判断中写明的值 "
        "{targets}；该判断在 {evals} 步中从未成立，学习率在整个运行中一直是 {lr}",
    "dynamics.lr_decay_never_due.cause":
        "运算符优先级（`%` 比 `+`、`-` 结合得更紧，`i + epoch * n % step == 0` 计算的是 i + ((epoch * n) % step)，"
        "几乎从不为 0）、余数与除数本身比较，或类型不同的里程碑（从配置读出的文本 '30' 与整数 30 比较）：代码描述的调度从未生效",
    "dynamics.lr_decay_never_due.next":
        "在取模前给计数加括号，例如 `(i + epoch * n) % step == 0`，或使用每次迭代调用一次的调度器（StepLR）",
}
