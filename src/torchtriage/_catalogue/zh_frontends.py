"""中文：TensorBoard / W&B 记录、notebook 魔法命令与命令行约定（issue 18）。"""

MESSAGES = {
    "dashboard.bad_tensorboard": "tensorboard={value!r}：应为日志目录（str 或 os.PathLike）或 "
                                 "torch.utils.tensorboard.SummaryWriter",
    "dashboard.bad_wandb": "wandb={value!r}：应为 True（使用当前运行或新建一个）或 wandb 的 run 对象",
    "cli.exit_codes": "退出码：\n"
                      "  0    完成；`run` 时为脚本自身的退出码（正常结束为 0）\n"
                      "  1    脚本抛出异常（报告之后是它的 traceback）；`splits`：发现泄漏\n"
                      "  2    输入错误：文件不存在、未知选项、路径不可写（stderr 上一行说明）\n"
                      "  130  被中断（Ctrl-C）",
    "cli.run_exit_codes": "退出码：脚本自身的（正常结束为 0，或它的 sys.exit 值），脚本抛出异常时为 1（先报告，"
                          "后 traceback），输入错误为 2（stderr 上一行说明），被中断为 130。仅有发现不改变退出码。",
    "cli.lab.help": "在内存中运行四个常见故障（广播的损失、被切断的计算图、指数溢出、同一书写者出现在两个划分中）并诊断",
    "cli.lab.description": "在内存中运行四个常见故障（广播的损失、被切断的计算图、指数溢出、同一书写者出现在两个划分中），并打印 torchtriage 的检查发现了什么。",
    "integration.nothing_found": "torchtriage：{steps} 步中未发现问题",
    "integration.bad_report": "report={value!r}：应为 \"auto\"（有发现时打印报告，否则打印一行）、True（总是）或 False（从不）",
    "integration.no_tensorboard_logger": "tensorboard=True：trainer 没有 TensorBoard logger；请给出日志目录"
                                         "（tensorboard=\"runs/x\"）或添加 lightning 的 TensorBoardLogger",
    "pytest.not_ok": "torchtriage 在本测试的训练代码中发现了问题：",
    "cli.version_help": "打印 torchtriage、torch 与 Python 的版本并退出",
    "cli.exit.report": "退出码：0 已生成报告；2 输入错误（REPORT.json 不存在或无法读取、--html 路径不可写：stderr 上一行说明）",
    "cli.exit.splits": "退出码：0 无泄漏；1 划分之间有泄漏；2 输入错误（文件不存在、未知的列或引擎：stderr 上一行说明）",
    "cli.exit.replay": "退出码：0 重放该步时未出现记录的故障；1 故障复现；2 输入错误（bundle 不存在或来自其他版本、factory 失败：stderr 上一行说明）",
    "cli.exit.shrink": "退出码：0 已写出最小 bundle；2 输入错误（bundle 不存在或来自其他版本、故障无法复现：stderr 上一行说明）",
    "cli.exit.make-test": "退出码：0 已写出回归测试与 FIX.md；2 输入错误（bundle 不存在或来自其他版本、--out 不可写：stderr 上一行说明）",
    "cli.exit.env": "退出码：0 已打印；2 无法写入标准输出（stderr 上一行说明）",
    "cli.exit.lab": "退出码：0 故障已运行并被诊断；2 无法写入标准输出（stderr 上一行说明）",
}
