"""Exception triage: when a training step raises, say what kind of fault it is, which module
was running, with which inputs and parameters, on which line of the user's code, and what to
check next. The original exception is always re-raised unchanged.

    _rules.py     the (exception type, message regex) → category/code table, with refinements
    _families.py  the frequent torch error families (issue 12), same Rule shape, tried after _rules
    _overlap.py   memory overlap (a write through an expanded tensor) as a layout fault (issue 27)
    _readings.py  families the vocabulary misread, and the place that raised (issue 27)
    _structure.py explanations from the program's structure: empty optimizer, DDP unused parameters,
                  the line that produced a tensor modified in place
    _heads.py     an output head wider than the vocabulary it feeds back into (the model's last
                  output's and loss's class axis, recorded by the check), against an embedding's rows
    _vocab.py     an unknown torch message read by its words and the operands (generic codes)
    _operands.py  the failing calls and their tensors (name, dtype, shape, device, layout, flags)
    _context.py   what the traceback says: innermost module, its inputs/parameters, the stage
    _consequence.py  an error raised on NaN/Inf operands after a non-finite finding: counted on it
    _explain.py   Finding construction, `triage_exception`, the session check `ExceptionTriage`
"""

from ._explain import ExceptionTriage as ExceptionTriage
from ._explain import explain as explain
from ._explain import triage_exception as triage_exception
from ._rules import RULES as RULES
from ._rules import classify as classify

__all__ = ["RULES", "ExceptionTriage", "classify", "explain", "triage_exception"]
