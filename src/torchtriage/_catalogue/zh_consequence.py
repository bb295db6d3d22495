"""中文：计入引发它的先前发现的错误（`_triage/_consequence.py`）。"""

MESSAGES = {
    "consequence.raised": "{error}（第 {step} 步，{where}），源于此发现产生的非有限值",
    "consequence.printed": "错误信息中打印的数值",
    "consequence.no_line": "不在你的代码中",
}
