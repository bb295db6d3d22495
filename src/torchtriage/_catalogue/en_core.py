"""English: report layout and core messages."""

MESSAGES = {
    "report.title": "torchtriage report",
    "report.empty": "No finding: nothing looked wrong in what torchtriage watched.",
    "report.primary": "Primary",
    "report.also": "Also found",
    "report.infos": "Informational",
    "report.where": "where",
    "report.step": "step",
    "report.stage": "stage",
    "report.module": "module",
    "report.op": "op",
    "report.parameter": "parameter",
    "report.line": "your line",
    "report.cause": "cause",
    "report.next": "next check",
    "report.evidence": "evidence",
    "report.count": "seen {count} times",
    "report.root_module": "<root>",
    "report.summary_line": "{errors} error(s), {warnings} warning(s), {infos} info(s) over {steps} step(s)",
    "internal.warning": "torchtriage: an internal error in {where} was ignored so that your run goes on: {error}",
}
