"""中文：复现包、重放、缩减、回归测试、环境。"""

MESSAGES = {
    "repro.written": "torchtriage：复现包已写入 {path}（第 {step} 步的 {what}，{mb} MB）",
    "repro.skipped": ("torchtriage：复现包：{part}（{mb} MB）超出 --max-bundle-mb（{limit} MB），未写入；"
                      "重放时将由你的代码重建这一部分"),
    "repro.write_failed": "torchtriage：无法把复现包写入 {path}：{error}",
    "repro.missing": "复现包 {path}：不存在",
    "repro.not_folder": "复现包 {path}：不是文件夹（复现包是一个文件夹）",
    "repro.no_manifest": "复现包 {path}：缺少 manifest.json，这不是一个完整的 torchtriage 复现包",
    "repro.bad_manifest": "复现包 {path}：manifest.json 中没有文件列表",
    "repro.format": "复现包 {path}：格式 {got!r} 不受支持；当前 torchtriage 读取 {expected!r}",
    "repro.version": ("复现包 {path}：由 torchtriage {got} 写入，当前是 torchtriage {expected}；"
                      "请用 torchtriage {got} 重放，或加 --allow-other-version（allow_other_version=True）强行尝试"),
    "repro.unknown_file": ("复现包 {path}：清单列出了 {file!r}，它不是复现包的文件"
                           "（只接受 JSON、文本和 .safetensors 文件）；拒绝打开"),
    "repro.file_missing": "复现包 {path}：缺少 {file}（复现包不完整）",
    "repro.checksum": ("复现包 {path}：{file} 与其 SHA-256 校验和不符（{size} 字节，记录为 {expected}）："
                       "写入后被截断或修改过"),
    "repro.pickle": ("复现包 {path}：{file} 看起来是 pickle 数据（按文件名或文件结构判断）；"
                     "torchtriage 复现包从不包含 pickle，打开它可能执行代码，因此拒绝该复现包"),
    "repro.no_batch": "复现包 {path}：没有批数据（放不下，或失败发生在模型运行之前）",
    "repro.replay.yes": "已复现：{what}",
    "repro.replay.no": "未复现：期望 {what}；重放发现 {seen}；异常：{exc}",
    "repro.note.custom_checks": ("注意：原始运行还用了自定义检查（{names}）；请用 checks=[...] 传入，"
                                 "或让工厂函数返回 {{'checks': [...]}}"),
    "repro.note.no_model_state": "注意：复现包中没有模型状态（过大或未捕获）；重放使用了你的模型自身的权重",
    "repro.note.no_optimizer_state": "注意：复现包中没有优化器状态；重放使用了你新建的优化器",
    "repro.note.forward_only": ("注意：没有记录带目标的损失，重放只运行了前向；"
                                "要重放反向和更新，请提供 step_fn（或 --script）"),
    "repro.mismatch": "模型与复现包的状态不匹配（模型 {got}，复现包记录 {expected}）：{details}",
    "repro.mismatch.missing": "复现包中缺少：{keys}",
    "repro.mismatch.extra": "模型中没有：{keys}",
    "repro.mismatch.shape": "形状不同：{keys}",
    "repro.mismatch.optimizer": "优化器与复现包的优化器状态不匹配（优化器 {got}，复现包记录 {expected}）：{error}",
    "repro.factory_result": ("{where}() 返回了 {got}；工厂函数应返回模型、(模型, 优化器)，"
                             "或包含 'model'（可选 'optimizer'、'step_fn'、'checks'）的字典"
                             "（多个模型时：'models' {{标签: 模型}} 与 'optimizers' [...]）"),
    "repro.need_model": "replay() 需要 model=、factory= 或 script=；收到的 model 类型为 {got}",
    "repro.no_script": "脚本 {script!r} 不存在",
    "repro.no_model_called": "脚本 {script} 从未调用类为 {cls}、参数与复现包一致的模型，无法重放失败的那一步",
    "repro.shrink.progress": "缩减：第 {n} 次重放：{size} 个样本 {samples}，前缀 {prefix} -> {verdict}",
    "repro.shrink.yes": "已复现",
    "repro.shrink.no": "消失",
    "repro.shrink.not_reproduced": "缩减：完整批数据不能复现该发现，无可缩减（{describe}）",
    "repro.shrink.done": ("缩减：共 {replays} 次重放；{n} 个样本中剩下 {kept} 个：{samples}；"
                          "序列前缀：{prefix}；最小复现包已写入 {out}"),
    "repro.make_test.source": "make-test 需要且只需要 --factory MODULE:FUNCTION 或 --script SCRIPT 之一",
    "repro.make_test.done": "make-test：已写入 {test}、{fix} 和最小复现包 {bundle}",
    "repro.cli.need_source": "请提供 --factory MODULE:FUNCTION 或 --script SCRIPT（复现包记录的脚本已不存在：{script}）",
    "repro.cli.factory_syntax": "--factory {value!r}：应为 MODULE:FUNCTION，例如 mymodels:make_model",
    "repro.cli.factory_import": "--factory {value!r}：无法导入（{error}）",
    "repro.fix_template": """# 修复记录：{symptom}

由 `torchtriage make-test` 于 {date} 生成。请填写标有 TODO 的部分；本文件与 `{test}` 放在一起，
该测试在缺陷存在时失败，修复后通过。

## 现象
- {message}
- 第 {step} 步，阶段 {stage}，模块 `{module}`，算子 `{op}`，你的代码行 {line}
- 命令：`{command}`（工作目录 `{cwd}`）

## 最小输入
- 原批次 {batch_size} 个样本中的 {samples}；序列前缀 {prefix}
  （由 `torchtriage shrink` 经 {replays} 次重放得到）
- 输入形状：{shapes}
- 复现包：`{bundle}/`（步前模型与优化器状态、批数据、随机数状态；无 pickle）

## 原因
TODO：第一个坏值、产生它的代码行，以及原因。

## 改动
TODO：修复它的差异或提交。

## 结果
| | 该发现 |
|---|---|
| 修复前 | 已复现（`torchtriage replay`） |
| 修复后 | TODO：运行 `pytest {test}` |
""",
}
