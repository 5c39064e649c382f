"""Random PyTorch programs for the fuzzer: a hypothesis strategy and the program it draws.

A program is Python source (``def forward(self, x0, ...)``) over a pool of live tensors: splits in
every call form, pieces taken out of them, slices, narrows, selects, cats and stacks of pieces in
any order, views, elementwise ops, linears, dtype changes and in-place writes. Every line is run
on concrete tensors while it is drawn, so each op is chosen to fit the shapes it actually gets,
and the printed source of a failing program is a ready-to-paste repro.
"""

from __future__ import annotations

import operator
import types
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.fx as fx
import torch.nn.functional as F
from hypothesis import reject, strategies as st

MAX_RANK = 4
MAX_SIZE = 12


def setitem(tensor: torch.Tensor, index: Any, value: Any) -> None:
    """``tensor[index] = value`` as a call: symbolic tracing cannot record item assignment, so
    ``Program.graph_module`` traces this as a leaf and retargets it to ``operator.setitem``, the
    node Dynamo makes for it."""
    tensor[index] = value


_NAMESPACE = {"torch": torch, "F": F, "setitem": setitem}


@dataclass
class Program:
    source: str
    inputs: tuple[torch.Tensor, ...]
    params: dict[str, torch.Tensor] = field(default_factory=dict)

    def module(self) -> torch.nn.Module:
        """The program as an eager module: the reference the optimized graph is compared to."""
        ns = dict(_NAMESPACE)
        exec(compile(self.source, "<fuzz program>", "exec"), ns)
        module = type("Program", (torch.nn.Module,), {"forward": ns["forward"]})()
        for name, value in self.params.items():
            module.register_buffer(name, value.clone())
        return module

    def graph_module(self) -> fx.GraphModule:
        module = self.module()
        graph = fx.Tracer(autowrap_functions=(setitem,)).trace(module)
        for node in graph.nodes:
            if node.target is setitem:
                node.target = operator.setitem
        return fx.GraphModule(module, graph)

    def __repr__(self) -> str:
        shapes = ", ".join(f"{tuple(t.shape)}:{str(t.dtype).removeprefix('torch.')}" for t in self.inputs)
        params = ", ".join(f"{k}{tuple(v.shape)}" for k, v in self.params.items())
        return f"Program(inputs=[{shapes}] params=[{params}])\n{self.source}"


def _dtype_name(dtype: torch.dtype) -> str:
    return "torch." + str(dtype).removeprefix("torch.")


class _Builder:
    """Draws one program line by line, running each line to know the shapes it makes."""

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
        scope = {**_NAMESPACE, "self": types.SimpleNamespace(**self.params)}
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

    # -- ops ------------------------------------------------------------------------------------

    def split(self, x: str | None = None, d: int | None = None) -> str | None:
        """A split-like call; returns the name of its tuple."""
        cands = self.ranked()
        if x is None:
            if not cands:
                return None
            x = self.pick(cands)
        shape = self.shape_of(x)
        d = self.dim(len(shape)) if d is None else d
        n = shape[d]
        form = self.one_of(["split_int", "split_list", "split_with_sizes", "chunk", "tensor_split",
                            "tensor_split_indices", "unbind"])
        if form == "split_int":
            k = self.draw(st.integers(1, max(n, 1)))
            expr = self.one_of([f"torch.split({x}, {k}, {d})", f"torch.split({x}, {k}, dim={d})",
                                f"{x}.split({k}, {d})" if d else f"{x}.split({k})",
                                f"torch.split({x}, split_size_or_sections={k}, dim={d})"])
        elif form in ("split_list", "split_with_sizes"):
            sizes = self.sizes(n)
            tup = f"({', '.join(map(str, sizes))},)"
            expr = self.one_of([f"torch.split({x}, {sizes}, {d})", f"{x}.split({sizes}, dim={d})",
                                f"{x}.split({tup}, {d})",
                                f"torch.split({x}, split_size_or_sections={sizes}, dim={d})"]
                               if form == "split_list" else
                               [f"{x}.split_with_sizes({sizes}, {d})", f"torch.split_with_sizes({x}, {sizes}, dim={d})"])
        elif form in ("chunk", "tensor_split"):
            c = self.draw(st.integers(1, max(min(n, 5), 1)))
            expr = self.one_of([f"torch.chunk({x}, {c}, {d})", f"{x}.chunk({c}, dim={d})",
                                f"torch.chunk({x}, chunks={c}, dim={d})"] if form == "chunk" else
                               [f"torch.tensor_split({x}, {c}, {d})", f"{x}.tensor_split({c}, dim={d})"])
        elif form == "tensor_split_indices":
            indices = sorted(self.draw(st.lists(st.integers(0, n), max_size=3)))
            expr = f"torch.tensor_split({x}, {indices}, dim={d})"
        else:
            expr = self.one_of([f"torch.unbind({x}, {d})", f"{x}.unbind(dim={d})", f"torch.unbind({x}, dim={d})"]
                               + ([f"{x}.unbind()"] if d == 0 else []))
        return self.emit(expr)

    def sizes(self, n: int) -> list[int]:
        """A random composition of n, now and then with an empty piece."""
        cuts = sorted(self.draw(st.lists(st.integers(0, n), max_size=4)))
        if not self.chance(0.15):
            cuts = sorted(set(c for c in cuts if 0 < c < n))
        points = [0, *cuts, n]
        return [b - a for a, b in zip(points, points[1:])]

    def take(self, tup: str | None = None, every: bool = False) -> list[str]:
        """Pieces out of a tuple: ``p = t[i]``, some or all of them, any order, negative indices."""
        if tup is None:
            if not self.tuples:
                return []
            tup = self.pick(self.tuples)
        count = len(self.env[tup])
        if count == 0:
            return []
        if every:
            order = list(range(count))
        else:
            order = self.draw(st.lists(st.integers(0, count - 1), min_size=1, max_size=min(count, 4)))
        names = []
        for i in order:
            index = i - count if self.chance(0.2) else i
            names.append(self.emit(f"{tup}[{index}]"))
        return names

    def narrow(self, x: str | None = None) -> None:
        cands = self.ranked()
        if x is None and not cands:
            return
        x = x or self.pick(cands)
        shape = self.shape_of(x)
        d = self.dim(len(shape))
        n = shape[d]
        start = self.draw(st.integers(-n, n - 1)) if n else 0
        length = self.draw(st.integers(0, n - (start % n if n else 0)))
        self.emit(self.one_of([f"torch.narrow({x}, {d}, {start}, {length})", f"{x}.narrow({d}, {start}, {length})",
                               f"torch.narrow({x}, dim={d}, start={start}, length={length})"]))

    def index(self, x: str | None = None) -> str | None:
        """Basic indexing: step-1 (now and then step-2) slices, ints, None and Ellipsis."""
        cands = self.ranked()
        if x is None and not cands:
            return None
        x = x or self.pick(cands)
        shape = self.shape_of(x)
        ellipsis = self.chance(0.2)
        used = self.draw(st.integers(1, len(shape)))
        dims = shape[len(shape) - used:] if ellipsis else shape[:used]
        parts = []
        for n in dims:
            kind = self.one_of(["full", "slice", "slice", "slice", "int", "none", "list"])
            if kind == "none":
                parts.append("None")
            if kind in ("full", "none"):
                parts.append(":")
            elif kind == "int" and n:
                parts.append(str(self.draw(st.integers(-n, n - 1))))
            elif kind == "list" and n and "[" not in "".join(parts):  # advanced indexing: a copy
                parts.append(str(self.draw(st.lists(st.integers(-n, n - 1), min_size=1, max_size=3))))
            else:  # a slice (also for an int index into an empty dim)
                bound = st.one_of(st.none(), st.integers(-n - 1, n + 1))
                start, stop = self.draw(bound), self.draw(bound)
                step = ":2" if self.chance(0.1) else ""
                parts.append(f"{'' if start is None else start}:{'' if stop is None else stop}{step}")
        if ellipsis:
            parts.insert(0, "...")
        return self.emit(f"{x}[{', '.join(parts)}]")

    def select(self) -> None:
        cands = self.ranked()
        if not cands:
            return
        x = self.pick(cands)
        shape = self.shape_of(x)
        d = self.dim(len(shape))
        if not shape[d]:
            return
        i = self.draw(st.integers(-shape[d], shape[d] - 1))
        self.emit(self.one_of([f"torch.select({x}, {d}, {i})", f"{x}.select({d}, {i})",
                               f"torch.select({x}, dim={d}, index={i})"]))

    def cat(self, items: list[str] | None = None, d: int | None = None) -> str | None:
        if items is None:
            items, d = self.cat_operands(stack=False)
            if not items:
                return None
        tup = self.one_of([f"[{', '.join(items)}]", f"({', '.join(items)},)"])
        return self.emit(self.one_of([f"torch.cat({tup}, {d})", f"torch.cat({tup}, dim={d})",
                                      f"torch.concat({tup}, dim={d})", f"torch.cat(tensors={tup}, dim={d})"]))

    def stack(self, items: list[str] | None = None, d: int | None = None) -> str | None:
        if items is None:
            items, d = self.cat_operands(stack=True)
            if not items:
                return None
        tup = f"[{', '.join(items)}]"
        return self.emit(self.one_of([f"torch.stack({tup}, {d})", f"torch.stack({tup}, dim={d})",
                                      f"torch.stack(tensors={tup}, dim={d})"]))

    def cat_operands(self, stack: bool) -> tuple[list[str], int]:
        """An anchor, a dim and pool tensors (or a fresh input) that fit beside it."""
        cands = self.tensors if stack else self.ranked()
        if not cands:
            return [], 0
        anchor = self.pick(cands)
        a = self.env[anchor]
        rank = a.dim()
        d = self.draw(st.integers(-rank - 1, rank)) if stack else self.dim(rank)
        same_dtype = not self.chance(0.1)

        def fits(t: torch.Tensor) -> bool:
            if t.dim() != rank or (same_dtype and t.dtype != a.dtype):
                return False
            return all(t.shape[i] == a.shape[i] for i in range(rank) if stack or i != d % rank)

        fitting = [n for n in self.tensors if fits(self.env[n])]
        items = self.draw(st.lists(st.sampled_from(list(reversed(fitting))), max_size=4))
        items.insert(self.draw(st.integers(0, len(items))), anchor)
        if self.chance(0.15):
            shape = self.shape_of(anchor)
            if not stack:
                shape[d] = self.draw(st.integers(1, 6))
            items.insert(self.draw(st.integers(0, len(items))), self.new_input(shape, a.dtype))
        return items, d

    def whole_tuple(self) -> None:
        """A cat or stack of a split's tuple itself (not its pieces)."""
        if not self.tuples:
            return
        tup = self.pick(self.tuples)
        shapes = [tuple(t.shape) for t in self.env[tup]]
        if not shapes:
            return
        rank = len(shapes[0])
        if self.chance(0.5) and len(set(shapes)) == 1:
            d = self.draw(st.integers(-rank - 1, rank))
            self.emit(f"torch.stack({tup}, {d})")
        elif rank:
            d = self.dim(rank)
            if all(s[:d % rank] + s[d % rank + 1:] == shapes[0][:d % rank] + shapes[0][d % rank + 1:] for s in shapes):
                self.emit(f"torch.cat({tup}, {d})")

    def view(self) -> None:
        if not self.tensors:
            return
        x = self.pick(self.tensors)
        shape = self.shape_of(x)
        rank = len(shape)
        kind = self.one_of(["reshape", "flatten", "unsqueeze", "squeeze", "transpose", "permute",
                            "unflatten", "contiguous", "expand"])
        if kind == "reshape":
            new = list(shape)
            if rank >= 2 and self.chance(0.5):
                i = self.draw(st.integers(0, rank - 2))
                new[i:i + 2] = [new[i] * new[i + 1]]
            elif rank:
                i = self.draw(st.integers(0, rank - 1))
                divisors = [k for k in range(1, new[i] + 1) if new[i] % k == 0] or [1]
                k = self.one_of(divisors)
                new[i:i + 1] = [k, new[i] // k]
            if new and self.chance(0.3):
                new[self.draw(st.integers(0, len(new) - 1))] = -1
            method = self.one_of(["view", "reshape"])
            if method == "view" and not self._views(x, new):
                method = "reshape"
            self.emit(f"{x}.{method}({new})" if self.chance(0.5) or not new
                      else f"{x}.{method}({', '.join(map(str, new))})")
        elif kind == "flatten":
            if rank == 0 or self.chance(0.3):
                self.emit(f"{x}.flatten()")
            else:
                s = self.draw(st.integers(0, rank - 1))
                e = self.draw(st.integers(s, rank - 1))
                self.emit(f"torch.flatten({x}, {s}, {e})")
        elif kind == "unsqueeze":
            d = self.draw(st.integers(-rank - 1, rank))
            self.emit(self.one_of([f"{x}.unsqueeze({d})", f"torch.unsqueeze({x}, {d})"]))
        elif kind == "squeeze" and rank:
            ones = [i for i, n in enumerate(shape) if n == 1]
            d = self.one_of(ones) if ones and self.chance(0.7) else self.dim(rank)
            self.emit(self.one_of([f"{x}.squeeze({d})", f"torch.squeeze({x}, {d})", f"{x}.squeeze()"]))
        elif kind == "transpose" and rank:
            a, b = self.dim(rank), self.dim(rank)
            forms = [f"{x}.transpose({a}, {b})", f"torch.transpose({x}, {a}, {b})"]
            self.emit(self.one_of(forms + ([f"{x}.t()"] if rank <= 2 else [])))
        elif kind == "permute" and rank:
            perm = self.draw(st.permutations(range(rank)))
            self.emit(f"{x}.permute({', '.join(map(str, perm))})")
        elif kind == "unflatten" and rank:
            d = self.dim(rank)
            divisors = [k for k in range(1, shape[d] + 1) if shape[d] % k == 0] or [1]
            k = self.one_of(divisors)
            self.emit(f"{x}.unflatten({d}, ({k}, {shape[d] // k}))")
        elif kind == "contiguous":
            self.emit(f"{x}.contiguous()")
        elif kind == "expand":  # size-1 dims (and a new leading one) broadcast: in-place writes to it fail
            new = [self.draw(st.integers(1, 4)) if n == 1 else -1 for n in shape]
            if self.chance(0.3):
                new.insert(0, self.draw(st.integers(1, 3)))
            self.emit(f"{x}.expand({', '.join(map(str, new))})" if new else f"{x}.expand([])")

    def _views(self, x: str, shape: list[int]) -> bool:
        try:
            self.env[x].view(shape)
            return True
        except RuntimeError:
            return False

    UNARY = ["torch.relu({x})", "{x}.relu()", "F.relu({x})", "torch.tanh({x})", "{x}.tanh()",
             "{x}.sigmoid()", "torch.sigmoid({x})", "-{x}", "torch.neg({x})", "{x}.exp()",
             "torch.clamp({x}, -0.5, 0.5)", "{x}.clamp(min=0.1)", "torch.nan_to_num({x})",
             "{x}.nan_to_num(nan=0.0, posinf=1.0)", "{x}.detach()", "F.gelu({x})", "{x}.abs()",
             "F.dropout({x}, 0.2, training=False)", "F.alpha_dropout({x}, 0.5)", "F.dropout({x}, 0.3)",
             "{x} * 2.0", "{x} + 1", "1.5 - {x}", "{x} / 3.0", "torch.mul({x}, 0.5)"]
    CASTS = ["{x}.float()", "{x}.to(torch.float64)", "{x}.half()", "{x}.double()",
             "{x}.to(torch.float32)", "{x}.type(torch.float64)", "{x}.to(dtype=torch.float16)"]

    def unary(self, x: str | None = None, form: str | None = None) -> str | None:
        cands = self.float_tensors()
        if x is None and not cands:
            return None
        x = x or self.pick(cands)
        form = form or self.one_of(self.UNARY * 3 + self.CASTS)
        return self.emit(form.format(x=x))

    def opaque(self) -> None:
        """Ops no rule looks inside: reductions, softmax, where, a max with its indices, cumsum."""
        cands = [n for n in self.ranked() if self.env[n].dtype.is_floating_point]
        if not cands:
            return
        x = self.pick(cands)
        d = self.dim(self.env[x].dim())
        form = self.one_of(["{x}.sum({d})", "torch.sum({x}, dim={d}, keepdim=True)", "{x}.mean(-1)",
                            "torch.softmax({x}, {d})", "F.softmax({x}, dim={d})", "torch.cumsum({x}, {d})",
                            "torch.where({x} > 0, {x}, {b})", "{x}.max({d})", "{x}.masked_fill({x} < 0, 0.0)",
                            "{x}.amax({d})", "{x}.clone()"])
        b = self.operand_for(x) if "{b}" in form else ""
        self.emit(form.format(x=x, d=d, b=b))

    BINARY = ["{a} + {b}", "torch.add({a}, {b})", "torch.add({a}, {b}, alpha=2)", "{a}.sub({b})",
              "{a} - {b}", "{a} * {b}", "torch.mul({a}, {b})", "{a} / {b}", "torch.div({a}, {b})",
              "torch.maximum({a}, {b})"]

    def binary(self) -> None:
        cands = self.float_tensors()
        if not cands:
            return
        a = self.pick(cands)
        b = self.operand_for(a, same_dtype=not self.chance(0.15))
        self.emit(self.one_of(self.BINARY).format(a=a, b=b))

    def operand_for(self, a: str, same_dtype: bool = True) -> str:
        """A second operand: same shape, broadcastable, a fresh input, or ``a`` itself."""
        t = self.env[a]
        shape = list(t.shape)
        kind = self.one_of(["same", "same", "broadcast", "fresh", "self"])
        if kind == "self":
            return a
        if kind in ("same", "broadcast"):
            def ok(u: torch.Tensor) -> bool:
                if same_dtype and u.dtype != t.dtype:
                    return False
                if kind == "same":
                    return list(u.shape) == shape
                try:
                    return list(torch.broadcast_shapes(u.shape, t.shape)) == shape
                except RuntimeError:
                    return False
            fitting = [n for n in self.float_tensors() if ok(self.env[n])]
            if fitting:
                return self.pick(fitting)
        new = shape[self.draw(st.integers(0, len(shape))):] if self.chance(0.5) else list(shape)
        new = [1 if self.chance(0.3) else n for n in new]
        return self.new_input(new, t.dtype if same_dtype else None)

    def linear(self, x: str | None = None, weight: str | None = None) -> str | None:
        cands = [n for n in self.ranked() if self.env[n].dtype in (torch.float32, torch.float64)]
        if x is None and not cands:
            return None
        x = x or self.pick(cands)
        t = self.env[x]
        if weight is None:
            fitting = [f"self.{k}" for k, w in self.params.items()
                       if w.dim() == 2 and w.shape[1] == t.shape[-1] and w.dtype == t.dtype]
            if fitting and self.chance(0.4):
                weight = self.one_of(fitting)
            else:
                weight = self.param([self.draw(st.integers(1, 8)), t.shape[-1]], t.dtype)
        out = self.env_param(weight).shape[0]
        forms = [f"F.linear({x}, {weight})", f"torch.matmul({x}, {weight}.t())", f"{x} @ {weight}.t()"]
        if self.chance(0.5):
            bias = self.param([out], t.dtype)
            forms = [f"F.linear({x}, {weight}, {bias})", f"F.linear({x}, {weight}, bias={bias})"]
        return self.emit(self.one_of(forms))

    def env_param(self, ref: str) -> torch.Tensor:
        return self.params[ref.removeprefix("self.")]

    INPLACE = ["{x}.add_({b})", "{x}.mul_(2.0)", "{x}.relu_()", "torch.relu_({x})",
               "F.relu({x}, inplace=True)", "{x}.clamp_(-1.0, 1.0)", "{x}.copy_({b})", "{x}.zero_()",
               "{x}.sub_({b}, alpha=0.5)", "{x}.sigmoid_()"]

    def inplace(self) -> None:
        cands = self.float_tensors()
        if not cands:
            return
        x = self.pick(cands)
        if self.chance(0.25) and self.env[x].dim():
            n = self.env[x].shape[0]
            start = self.draw(st.integers(0, n))
            index = f"(slice({start}, {self.draw(st.integers(start, n))}),)"
            value = self.operand_for(x) if self.chance(0.3) else self.one_of(["0.0", "1.5"])
            self.statement(f"setitem({x}, {index}, {value})")
            return
        form = self.one_of(self.INPLACE)
        b = self.operand_for(x) if "{b}" in form else ""
        self.emit(form.format(x=x, b=b))

    def random(self) -> None:
        """Random draws: kept in program order, so a fixed seed gives the same values."""
        cands = self.float_tensors()
        if not cands:
            return
        x = self.pick(cands)
        self.emit(self.one_of(["F.dropout({x}, 0.3)", "F.dropout({x}, p=0.5, training=True)", "torch.rand_like({x})",
                               "{x} + torch.randn_like({x})", "torch.bernoulli(torch.sigmoid({x}))"]).format(x=x))

    # -- motifs: the patterns the rules look for, drawn often enough to matter -----------------

    def split_map_cat(self) -> None:
        """split → an op per piece → cat (pieces in order, reordered, or a subset)."""
        cands = self.ranked()
        if not cands:
            return
        x = self.pick(cands)
        rank = self.env[x].dim()
        d = self.dim(rank)
        tup = self.split(x, d)
        pieces = self.take(tup, every=True)
        if not pieces:
            return
        same = self.chance(0.6)
        form = self.one_of(self.UNARY)
        mapped = []
        for p in pieces:
            if self.chance(0.85) and self.env[p].dtype.is_floating_point:
                p = self.unary(p, form if same else None)
            mapped.append(p)
        order = self.one_of(["keep", "keep", "shuffle", "subset"])
        if order == "shuffle":
            mapped = self.draw(st.permutations(mapped))
        elif order == "subset":
            mapped = self.draw(st.lists(st.sampled_from(mapped), min_size=1, max_size=len(mapped)))
        ranks = {self.env[p].dim() for p in mapped}
        if ranks == {rank}:
            self.cat(mapped, d)
        elif len({tuple(self.env[p].shape) for p in mapped}) == 1:
            self.stack(mapped, d)

    def cat_then_split(self) -> None:
        """cat → split on the same boundaries, or other ones."""
        items, d = self.cat_operands(stack=False)
        if not items:
            return
        out = self.cat(items, d)
        self.take(self.split(out, d) if self.chance(0.7) else self.split(out))

    def sliced_binary(self) -> None:
        """The same slice of two same-shape tensors, or slices of one and one tensor shared by
        all, combined elementwise; maybe glued back (a stack where the slices are of one size)."""
        cands = self.ranked()
        if not cands:
            return
        a = self.pick(cands)
        if not self.env[a].dtype.is_floating_point:
            return
        b = self.operand_for(a)
        if self.env[b].shape != self.env[a].shape:
            return
        shape = self.shape_of(a)
        d = self.dim(len(shape))
        sizes = self.sizes(shape[d])
        form = self.one_of(self.BINARY)
        one_size = len(set(sizes)) == 1
        shared = self.new_input([*shape[:d], sizes[0], *shape[d + 1:]], self.env[a].dtype) \
            if one_size and self.chance(0.3) else None
        outs, start = [], 0
        for n in sizes:
            sl = f"{start}, {n}"
            outs.append(self.emit(form.format(a=f"{a}.narrow({d}, {sl})", b=shared or f"{b}.narrow({d}, {sl})")))
            start += n
        if self.chance(0.6):
            if one_size and self.chance(0.5):
                self.stack(outs, self.draw(st.integers(-len(shape) - 1, len(shape))))
            else:
                self.cat(outs, d)

    def pieces_linear_cat(self) -> None:
        """One weight applied to every piece of a split, glued back (horizontal fusion): each
        piece with a bias of its own or none, or one Linear on all of them (a shared tower), on
        the pieces themselves or on an elementwise op of each (separate inputs)."""
        cands = [n for n in self.ranked(2) if self.env[n].dtype in (torch.float32, torch.float64)]
        if not cands:
            return
        x = self.pick(cands)
        rank = self.env[x].dim()
        d = self.draw(st.integers(0, rank - 2))
        pieces = self.take(self.split(x, d), every=True)
        if not pieces or any(self.env[p].dim() != rank for p in pieces):
            return
        weight = self.param([self.draw(st.integers(1, 8)), self.env[x].shape[-1]], self.env[x].dtype)
        if not self.chance(0.5):
            self.cat([self.linear(p, weight) for p in pieces], d)
            return
        bias = f", {self.param([self.env_param(weight).shape[0]], self.env[x].dtype)}" if self.chance(0.5) else ""
        if self.chance(0.5):
            pieces = [self.unary(p, self.one_of(self.UNARY)) for p in pieces]
        self.cat([self.emit(f"F.linear({p}, {weight}{bias})") for p in pieces], d)

    def parallel_linears(self) -> None:
        """Linears with their own weights on one input (horizontal fusion: one linear on the
        concatenated weights), their outputs glued together or returned apart."""
        cands = [n for n in self.ranked() if self.env[n].dtype in (torch.float32, torch.float64)]
        if not cands:
            return
        x = self.pick(cands)
        t = self.env[x]
        bias = self.chance(0.7)
        outs = []
        for _ in range(self.draw(st.integers(2, 6))):
            weight = self.param([self.draw(st.integers(1, 6)), t.shape[-1]], t.dtype)
            b = f", {self.param([self.env_param(weight).shape[0]], t.dtype)}" if bias else ""
            outs.append(self.emit(f"F.linear({x}, {weight}{b})"))
        if self.chance(0.6):
            self.cat(outs, -1)

    def unbind_stack(self) -> None:
        cands = self.ranked()
        if not cands:
            return
        x = self.pick(cands)
        rank = self.env[x].dim()
        d = self.dim(rank)
        pieces = self.take(self.emit(f"torch.unbind({x}, {d})"), every=True)
        if self.chance(0.5):
            pieces = [self.unary(p) if self.env[p].dtype.is_floating_point else p for p in pieces]
        self.stack(pieces, self.draw(st.integers(-rank, rank - 1)) if self.chance(0.3) else d)

    OPS = ("split", "take", "narrow", "index", "select", "cat", "stack", "whole_tuple", "view",
           "unary", "binary", "linear", "inplace", "opaque", "random", "split_map_cat", "cat_then_split",
           "sliced_binary", "pieces_linear_cat", "parallel_linears", "unbind_stack")

    def step(self) -> None:
        weighted = [op for op in self.OPS for _ in range(self.mix.get(op, 0))]
        getattr(self, self.one_of(weighted))()

    def outputs(self) -> str:
        """Usually the last value, and any others: inputs, pieces, the same value twice, a value
        and its detach (AOTAutograd fails on a partial view of a computed tensor so returned,
        which a rewrite must not make of a fresh one: seed 5139), a tuple."""
        names = self.draw(st.lists(st.sampled_from(list(reversed(self.tensors))), max_size=3))
        if not names or self.chance(0.7):
            names.insert(0, self.tensors[-1])
        if self.chance(0.1):
            names.append(f"{names[0]}.detach()")
        if self.tuples and self.chance(0.1):
            names.append(self.pick(self.tuples))
        if len(names) == 1 and self.chance(0.5):
            return names[0]
        return f"({', '.join(names)},)" if self.chance(0.8) else f"[{', '.join(names)}]"


#: How often each op is drawn (relative weights), per program flavour.
MIXES: dict[str, dict[str, int]] = {
    "general": {"split": 3, "take": 4, "narrow": 2, "index": 3, "select": 1, "cat": 3, "stack": 2,
                "whole_tuple": 1, "view": 3, "unary": 3, "binary": 3, "linear": 1, "inplace": 1, "opaque": 1,
                "split_map_cat": 2, "cat_then_split": 1, "sliced_binary": 1, "pieces_linear_cat": 1,
                "parallel_linears": 1, "unbind_stack": 1},
    "split_cat": {"split": 2, "take": 3, "narrow": 1, "index": 1, "cat": 2, "stack": 1,
                  "whole_tuple": 1, "unary": 1, "split_map_cat": 4, "cat_then_split": 3,
                  "sliced_binary": 2, "pieces_linear_cat": 1, "parallel_linears": 1, "unbind_stack": 2},
    "mutation": {"split": 2, "take": 3, "narrow": 1, "index": 2, "cat": 2, "view": 2, "unary": 2,
                 "binary": 2, "inplace": 5, "opaque": 1, "random": 1, "split_map_cat": 2, "cat_then_split": 1},
}


#: The ``modes`` mix: general's ops but in-place ones (its programs are differentiated, and a
#: write to what autograd saved fails in eager too), and a with-block (see :func:`programs`).
MIXES["modes"] = {op: n for op, n in MIXES["general"].items() if op != "inplace"}

#: ``with`` blocks the ``modes`` mix puts around a run of a program's statements.
MODES = ["torch.no_grad()", "torch.enable_grad()", 'torch.autocast("cpu", dtype=torch.bfloat16)',
         'torch.autocast("cpu", enabled=False)']


@st.composite
def programs(draw: Callable[[Any], Any], mix: str = "general", max_steps: int = 10) -> Program:
    """``mix`` "modes": a general program with a run of its statements in a ``with`` block that
    switches grad mode or autocast (optimus_egg.modes)."""
    b = _Builder(draw, draw(st.integers(0, 2**31 - 1)), MIXES[mix])
    for _ in range(draw(st.integers(1, 3))):
        b.new_input(b.random_shape())
    for _ in range(draw(st.integers(1, max_steps))):
        b.step()
    ret = b.outputs()
    params = ", ".join(["self", *b.input_names])
    lines = [f"    {line}" for line in b.lines]
    if mix == "modes" and lines:
        start = draw(st.integers(0, len(lines) - 1))
        end = draw(st.integers(start + 1, len(lines)))
        lines[start:end] = [f"    with {draw(st.sampled_from(MODES))}:", *(f"    {line}" for line in lines[start:end])]
    body = "\n".join([*lines, f"    return {ret}"])
    program = Program(f"def forward({params}):\n{body}\n", tuple(b.input_values), dict(b.params))
    if mix == "modes":
        try:  # the statements were drawn without the block: under autocast some no longer run
            program.module()(*[t.clone() for t in program.inputs])
        except (RuntimeError, IndexError, ValueError, TypeError):
            reject()
    return program
