"""非有限值哨兵的延后一步读取（`late_read=True`）。"""

MESSAGES = {
    "late.found": "第 {step} 步的{stage}中首次出现非有限值，延后一步读取（late_read=True）：该步的更新已执行，未重放该步",
    "late.stage.data": "批数据",
    "late.stage.forward": "模型输出",
    "late.stage.loss": "损失",
    "late.stage.backward": "梯度",
    "late.cause": "late_read=True 在下一步才读取每一步的标志，因此无法阻止或重放该步；之后的每一步都立即读取并定位。",
    "late.next": "去掉 late_read=True（或使用 on_anomaly=\"skip_step\"）重新运行，以把第一个非有限值定位到具体算子和代码行。",
    "late.bad_option": "late_read={given!r}；可接受：True 或 False",
}
