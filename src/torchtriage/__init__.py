"""torchtriage: find where and why a PyTorch training run went wrong.

The public surface is re-exported here; implementation lives in private modules. Names are
resolved on first use (PEP 562), so that `import torchtriage` (and the pytest plugin, which
pytest loads in every run of an environment where torchtriage is installed) does not import
torch until something is actually used.
"""

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from ._catalogue import get_language as get_language
    from ._catalogue import set_language as set_language
    from ._checker import Checker as Checker
    from ._checker import LossCall as LossCall
    from ._contracts import ContractHandle as ContractHandle
    from ._contracts import TensorSpec as TensorSpec
    from ._contracts import audit_tensor as audit_tensor
    from ._contracts import expect as expect
    from ._diff import diff as diff
    from ._env import collect_env as collect_env
    from ._errors import AnomalyError as AnomalyError
    from ._errors import BundleError as BundleError
    from ._errors import ConfigError as ConfigError
    from ._errors import ContractError as ContractError
    from ._errors import TriageError as TriageError
    from ._errors import TriageInternalWarning as TriageInternalWarning
    from ._errors import TriageWarning as TriageWarning
    from ._findings import Category as Category
    from ._findings import Finding as Finding
    from ._findings import Report as Report
    from ._findings import Severity as Severity
    from ._findings import Stage as Stage
    from ._gradients import diagnose_gradients as diagnose_gradients
    from ._leakage import check_preprocessing as check_preprocessing
    from ._leakage import check_splits as check_splits
    from ._nonfinite import NonFiniteSentinel as NonFiniteSentinel
    from ._repro import Bundle as Bundle
    from ._repro import ReplayResult as ReplayResult
    from ._repro import ShrinkResult as ShrinkResult
    from ._repro import load_bundle as load_bundle
    from ._repro import replay as replay
    from ._repro import shrink as shrink
    from ._seed import audit_tensor_contract as audit_tensor_contract
    from ._seed import classify_issue as classify_issue
    from ._seed import debug_priority as debug_priority
    from ._seed import diagnose_none_grad as diagnose_none_grad
    from ._seed import first_nonfinite_step as first_nonfinite_step
    from ._seed import locate_failure_zone as locate_failure_zone
    from ._session import Session as Session
    from ._session import current_session as current_session
    from ._session import watch as watch
    from ._silent import check_causal as check_causal
    from ._silent import check_exp_overflow as check_exp_overflow
    from ._silent import check_loss_broadcast as check_loss_broadcast
    from ._silent import check_loss_inputs as check_loss_inputs
    from ._silent import check_padding as check_padding
    from ._silent import check_token_shift as check_token_shift
    from ._silent import check_training_loop as check_training_loop
    from ._summary import TensorSummary as TensorSummary
    from ._summary import summarize as summarize
    from ._triage import triage_exception as triage_exception

# public name -> private module that defines it
_EXPORTS: dict[str, str] = {
    "AnomalyError": "._errors",
    "Bundle": "._repro",
    "BundleError": "._errors",
    "Category": "._findings",
    "Checker": "._checker",
    "ConfigError": "._errors",
    "ContractError": "._errors",
    "ContractHandle": "._contracts",
    "Finding": "._findings",
    "LossCall": "._checker",
    "NonFiniteSentinel": "._nonfinite",
    "ReplayResult": "._repro",
    "Report": "._findings",
    "Session": "._session",
    "Severity": "._findings",
    "ShrinkResult": "._repro",
    "Stage": "._findings",
    "TensorSpec": "._contracts",
    "TensorSummary": "._summary",
    "TriageError": "._errors",
    "TriageInternalWarning": "._errors",
    "TriageWarning": "._errors",
    "audit_tensor": "._contracts",
    "audit_tensor_contract": "._seed",
    "check_causal": "._silent",
    "check_exp_overflow": "._silent",
    "check_loss_broadcast": "._silent",
    "check_loss_inputs": "._silent",
    "check_padding": "._silent",
    "check_preprocessing": "._leakage",
    "check_splits": "._leakage",
    "check_token_shift": "._silent",
    "check_training_loop": "._silent",
    "classify_issue": "._seed",
    "collect_env": "._env",
    "current_session": "._session",
    "debug_priority": "._seed",
    "diagnose_gradients": "._gradients",
    "diagnose_none_grad": "._seed",
    "diff": "._diff",
    "expect": "._contracts",
    "first_nonfinite_step": "._seed",
    "get_language": "._catalogue",
    "load_bundle": "._repro",
    "locate_failure_zone": "._seed",
    "replay": "._repro",
    "set_language": "._catalogue",
    "shrink": "._repro",
    "summarize": "._summary",
    "triage_exception": "._triage",
    "watch": "._session",
}

__all__ = [
    "AnomalyError",
    "Bundle",
    "BundleError",
    "Category",
    "Checker",
    "ConfigError",
    "ContractError",
    "ContractHandle",
    "Finding",
    "LossCall",
    "NonFiniteSentinel",
    "ReplayResult",
    "Report",
    "Session",
    "Severity",
    "ShrinkResult",
    "Stage",
    "TensorSpec",
    "TensorSummary",
    "TriageError",
    "TriageInternalWarning",
    "TriageWarning",
    "audit_tensor",
    "audit_tensor_contract",
    "check_causal",
    "check_exp_overflow",
    "check_loss_broadcast",
    "check_loss_inputs",
    "check_padding",
    "check_preprocessing",
    "check_splits",
    "check_token_shift",
    "check_training_loop",
    "classify_issue",
    "collect_env",
    "current_session",
    "debug_priority",
    "diagnose_gradients",
    "diagnose_none_grad",
    "diff",
    "expect",
    "first_nonfinite_step",
    "get_language",
    "load_bundle",
    "locate_failure_zone",
    "replay",
    "set_language",
    "shrink",
    "summarize",
    "triage_exception",
    "watch",
]



def __getattr__(name: str) -> _typing.Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            value: _typing.Any = version("torchtriage")
        except PackageNotFoundError:  # running from a source tree
            value = "0+unknown"
    elif name == "load_ipython_extension":  # `%load_ext torchtriage`; not cached, not public API
        return _importlib.import_module("._notebook", __name__).load_ipython_extension
    elif name in _EXPORTS:
        value = getattr(_importlib.import_module(_EXPORTS[name], __name__), name)
        if isinstance(value, type) and value.__module__.startswith("torchtriage."):
            value.__module__ = "torchtriage"  # tracebacks and reprs say torchtriage.X
    else:
        raise AttributeError(f"module 'torchtriage' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(__all__) | {"__version__"})
