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


_CALL = re.compile(r"^\s*(?:\w+\s*=\s*)?(cpp_fused_\w+\(|triton_\w+\.run\(|extern_kernels\.\w+\(|aten\.\w+)",
                   re.M)


def wrapper_launches(code: str) -> int:
    """Kernel calls in the ``call`` function of Inductor's generated wrapper."""
    start = code.find("def call(")
    if start < 0:
        return 0
    body = code[start:]
    first_line = body.find("\n") + 1
    end = re.search(r"^\S", body[first_line:], re.M)
    body = body[: first_line + end.start()] if end else body
    return len(_CALL.findall(body))
