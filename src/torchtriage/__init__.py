"""torchtriage: find where and why a PyTorch training run went wrong.

The public surface is re-exported here; implementation lives in private modules.
"""

from importlib.metadata import PackageNotFoundError, version

from ._catalogue import get_language as get_language
from ._catalogue import set_language as set_language
from ._checker import Checker as Checker
from ._checker import LossCall as LossCall
from ._errors import AnomalyError as AnomalyError
from ._errors import BundleError as BundleError
from ._errors import ConfigError as ConfigError
from ._errors import ContractError as ContractError
from ._errors import TriageError as TriageError
from ._errors import TriageInternalWarning as TriageInternalWarning
from ._findings import Category as Category
from ._findings import Finding as Finding
from ._findings import Report as Report
from ._findings import Severity as Severity
from ._findings import Stage as Stage
from ._nonfinite import NonFiniteSentinel as NonFiniteSentinel
from ._session import Session as Session
from ._session import TriageWarning as TriageWarning
from ._session import current_session as current_session
from ._session import watch as watch
from ._summary import TensorSummary as TensorSummary
from ._summary import summarize as summarize

try:
    __version__ = version("torchtriage")
except PackageNotFoundError:  # running from a source tree
    __version__ = "0+unknown"

for _obj in (Category, Finding, Report, Severity, Stage, Session, TensorSummary, Checker, LossCall,
             NonFiniteSentinel):
    _obj.__module__ = "torchtriage"
del _obj

__all__ = [
    "AnomalyError",
    "BundleError",
    "Category",
    "Checker",
    "ConfigError",
    "ContractError",
    "Finding",
    "LossCall",
    "NonFiniteSentinel",
    "Report",
    "Session",
    "Severity",
    "Stage",
    "TensorSummary",
    "TriageError",
    "TriageInternalWarning",
    "TriageWarning",
    "current_session",
    "get_language",
    "set_language",
    "summarize",
    "watch",
]
