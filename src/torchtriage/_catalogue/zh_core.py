"""中文：报告版式与核心消息。"""

MESSAGES = {
    "report.title": "torchtriage 诊断报告",
    "report.empty": "没有发现异常：torchtriage 观察到的部分一切正常。",
    "report.primary": "首要问题",
    "report.also": "其他发现",
    "report.infos": "提示信息",
    "report.where": "位置",
    "report.step": "步",
    "report.stage": "阶段",
    "report.module": "模块",
    "report.op": "算子",
    "report.parameter": "参数",
    "report.line": "你的代码行",
    "report.cause": "原因",
    "report.next": "下一项检查",
    "report.evidence": "证据",
    "report.count": "共出现 {count} 次",
    "report.root_module": "<根模块>",
    "report.summary_line": "{errors} 个错误，{warnings} 个警告，{infos} 条提示，共 {steps} 步",
    "internal.warning": "torchtriage：{where} 中的内部错误已被忽略，你的训练继续运行：{error}",
}
