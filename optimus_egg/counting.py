"""Kernel counting: what the cost model predicts (eager launches) and what Inductor emits."""

from __future__ import annotations

import re
from typing import Any, Callable

from torch.utils._python_dispatch import TorchDispatchMode

from optimus_egg.optable import NO_KERNEL


def launches_kernel(func: Any) -> bool:
    """Whether an ATen op runs a kernel in eager mode: not a view (a result that aliases an input
    without writing it) and not in :data:`~optimus_egg.optable.NO_KERNEL`. An in-place op writes
    the tensor it returns, and is a kernel."""
    if func._schema.name.split("::")[-1] in NO_KERNEL:
        return False
    return not any(r.alias_info is not None and not r.alias_info.is_write for r in func._schema.returns)


class _LaunchCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.count += launches_kernel(func)
        return func(*args, **(kwargs or {}))


def eager_launches(fn: Callable[..., Any], *args: Any) -> int:
    """ATen ops that run a kernel (:func:`launches_kernel`), run eagerly: one GPU launch each."""
    with _LaunchCounter() as counter:
        fn(*args)
    return counter.count


#: Calls in a generated wrapper: kernels Inductor generated, and extern (library or ATen) calls.
_KERNEL = r"cpp_fused_\w+\(|triton_\w+\.run\("
_EXTERN = r"extern_kernels\.\w+\(|aten\.\w+|torch\.ops\.\w+"
_LINE = r"^\s*(?:\w+\s*=\s*)?({})"
_CALL = re.compile(_LINE.format(_KERNEL + "|" + _EXTERN), re.M)
_EXTERN_CALL = re.compile(_LINE.format(_EXTERN), re.M)


def _call_body(code: str) -> str:
    """The ``call`` function of Inductor's generated wrapper ('' when there is none)."""
    start = code.find("def call(")
    if start < 0:
        return ""
    body = code[start:]
    first_line = body.find("\n") + 1
    end = re.search(r"^\S", body[first_line:], re.M)
    return body[: first_line + end.start()] if end else body


def wrapper_launches(code: str) -> int:
    """Kernel calls in the ``call`` function of Inductor's generated wrapper."""
    return len(_CALL.findall(_call_body(code)))


def wrapper_extern_calls(code: str) -> int:
    """... of which extern calls (a library matmul, an ATen fallback): a launch each on a GPU."""
    return len(_EXTERN_CALL.findall(_call_body(code)))
