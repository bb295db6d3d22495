"""中文：按模块名冻结的规则够不到其测试所选中的参数。"""

MESSAGES = {
    "gradient.freeze_missed_bare_parameter":
        "{param}（{elements} 个元素）仍然可训练并且被更新了，尽管冻结规则选中了它的名字：遍历 {iterates}() 的循环"
        "（测试在第 {test_line} 行）只看到模块，而 {param} 是直接注册在 {owner} 上的参数；另有 {frozen} 个张量已冻结",
    "gradient.freeze_missed_bare_parameter.unmoved":
        "{param}（{elements} 个元素）仍然可训练，尽管冻结规则的测试（第 {test_line} 行）选中了它的名字："
        "遍历 {iterates}() 的循环只看到模块，而 {param} 是直接注册在 {owner} 上的参数",
    "gradient.freeze_missed_bare_parameter.cause":
        "named_modules() / named_children() 交给测试的是模块名；属于带子模块的模块的参数（可学习的查询、"
        "class token、位置表）从不在其中，所以写着它名字的模式永远不会命中，它在被冻结的部分里继续训练",
    "gradient.freeze_missed_bare_parameter.next":
        "把规则也应用到 named_parameters() 上（名字匹配的参数设 requires_grad = False），"
        "然后核对可训练参数的数量是否符合预期",
}
