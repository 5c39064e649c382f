"""Kernel counting: what the cost model predicts (eager launches) and what Inductor emits."""

from __future__ import annotations

import re
from typing import Any, Callable

from torch.utils._python_dispatch import TorchDispatchMode


class _LaunchCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if not any(r.alias_info is not None for r in func._schema.returns):
            self.count += 1
        return func(*args, **(kwargs or {}))


def eager_launches(fn: Callable[..., Any], *args: Any) -> int:
    """ATen ops that are not views, run eagerly: one GPU kernel launch each."""
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
