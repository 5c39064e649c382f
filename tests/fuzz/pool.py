"""The fuzzer's building blocks: the pool of live values a program is drawn over, and the
drawing helpers every op uses (tests/fuzz/ops.py, tests/fuzz/programs.py)."""

from __future__ import annotations

import types
from typing import Any, Callable

import torch
import torch.nn.functional as F
from hypothesis import reject, strategies as st

MAX_RANK = 4
MAX_SIZE = 12


def setitem(tensor: torch.Tensor, index: Any, value: Any) -> None:
    """``tensor[index] = value`` as a call: symbolic tracing cannot record item assignment, so
    ``Program.graph_module`` traces this as a leaf and retargets it to ``operator.setitem``, the
    node Dynamo makes for it."""
    tensor[index] = value


NAMESPACE = {"torch": torch, "F": F, "setitem": setitem}


class Pool:
    """A program being drawn line by line: its inputs, parameters and lines, and every value it
    has made so far (each line is run when drawn, to know the shapes it makes)."""

    def __init__(self, draw: Callable[[Any], Any], seed: int, mix: dict[str, int]) -> None:
        self.draw = draw
        self.gen = torch.Generator().manual_seed(seed)
        self.mix = mix
        self.env: dict[str, Any] = {}  # name -> concrete tensor or tuple of tensors
        self.lines: list[str] = []
        self.input_names: list[str] = []
        self.input_values: list[torch.Tensor] = []
        self.params: dict[str, torch.Tensor] = {}
        self.tensors: list[str] = []  # live tensor names, oldest first
        self.tuples: list[str] = []
        self.count = 0

    # -- drawing helpers ----------------------------------------------------------------------

    def pick(self, names: list[str]) -> str:
        """A name, newest first: shrinking prefers the latest value (short programs)."""
        return self.draw(st.sampled_from(list(reversed(names))))

    def chance(self, p: float) -> bool:
        return self.draw(st.integers(0, 99)) < p * 100

    def one_of(self, options: list[Any]) -> Any:
        return self.draw(st.sampled_from(options))

    def dim(self, rank: int) -> int:
        return self.draw(st.integers(-rank, rank - 1))

    def shape_of(self, name: str) -> list[int]:
        return list(self.env[name].shape)

    def value(self, shape: list[int], dtype: torch.dtype) -> torch.Tensor:
        return torch.randn(shape, generator=self.gen).to(dtype)

    def new_input(self, shape: list[int], dtype: torch.dtype | None = None) -> str:
        dtype = dtype or self.one_of([torch.float32] * 8 + [torch.float64, torch.float16, torch.bfloat16, torch.int64])
        name = f"x{len(self.input_names)}"
        value = self.value(shape, dtype)
        self.input_names.append(name)
        self.input_values.append(value.clone())
        self.env[name] = value
        self.tensors.append(name)
        return name

    def random_shape(self) -> list[int]:
        rank = self.draw(st.integers(1, MAX_RANK))
        return [self.draw(st.integers(1, MAX_SIZE)) for _ in range(rank)]

    def param(self, shape: list[int], dtype: torch.dtype) -> str:
        name = f"w{len(self.params)}"
        self.params[name] = torch.randn(shape, generator=self.gen).div(max(shape[-1], 1) ** 0.5).to(dtype)
        return f"self.{name}"

    def run(self, code: str, mode: str) -> Any:
        scope = {**NAMESPACE, "self": types.SimpleNamespace(**self.params)}
        try:
            return eval(code, scope, self.env) if mode == "eval" else exec(code, scope, self.env)
        except (RuntimeError, IndexError, ValueError, TypeError):
            reject()  # a combination the op doesn't accept: draw another program

    def emit(self, expr: str) -> str:
        """``v = expr``: run it, and add the result to the pool."""
        result = self.run(expr, "eval")
        name = f"v{self.count}"
        self.count += 1
        self.env[name] = result
        self.lines.append(f"{name} = {expr}")
        if isinstance(result, torch.Tensor):
            self.tensors.append(name)
        else:
            self.tuples.append(name)
        return name

    def statement(self, code: str) -> None:
        self.run(code, "exec")
        self.lines.append(code)

    def ranked(self, minimum: int = 1) -> list[str]:
        return [n for n in self.tensors if self.env[n].dim() >= minimum]

    def float_tensors(self) -> list[str]:
        return [n for n in self.tensors if self.env[n].dtype.is_floating_point]

    def env_param(self, ref: str) -> torch.Tensor:
        return self.params[ref.removeprefix("self.")]
