"""The fuzzer's ops: each draws one call (in any of its spellings) that fits the values in the
pool, runs it and adds its result; programs.py combines them into motifs and programs."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from tests.fuzz.pool import Pool


class Ops(Pool):
    """One method per op: it picks its operands from the pool (or makes fresh inputs and
    parameters), and does nothing where no value fits."""

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
