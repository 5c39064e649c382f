"""The fuzzer's oracle: an optimized program against the eager one, values and aliasing."""

from __future__ import annotations

import copy
import re
from typing import Any

import torch
import torch._inductor.config as inductor_config
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from optimus_egg import optimize
from optimus_egg.outputs import _detached_twins
from optimus_egg.pipeline import capture
from optimus_egg.effects import storage_key
from optimus_egg.nodes import bind, static_int, val
from tests.fuzz.programs import Program

TRIALS = 3  # the example inputs, then fresh random ones


def _fresh(t: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    return torch.randn(t.shape, generator=gen).to(t.dtype)


def aliases(outputs: list[Any], inputs: list[torch.Tensor]) -> list[set[tuple[str, int]]]:
    """For each output, the inputs and other outputs it shares storage with.

    Tensors without elements are left out: no write can be seen through them."""
    def key(t: Any) -> int | None:
        return t.untyped_storage()._cdata if isinstance(t, torch.Tensor) and t.numel() else None

    keys = [key(t) for t in outputs]
    in_keys = [key(t) for t in inputs]
    return [set() if k is None else
            {("input", j) for j, kj in enumerate(in_keys) if kj == k}
            | {("output", j) for j, kj in enumerate(keys) if kj == k and j != i}
            for i, k in enumerate(keys)]


def _example(program: Program, grad: bool) -> list[torch.Tensor]:
    """The example inputs; for ``grad`` the floating ones require grad, as in training."""
    return [t.clone().requires_grad_(grad and t.is_floating_point()) for t in program.inputs]


def traced_graph(program: Program) -> torch.fx.GraphModule | None:
    """The program as ``fx.symbolic_trace`` traces it, with torch's fake values on its nodes (None
    where torch's own fake tensors cannot run it: torch 2.11's decomposition of a split of an
    empty tensor raised IndexError; ``optimize`` then keeps the graph as written, and Dynamo
    cannot capture such a program either)."""
    try:
        return capture(program.graph_module(), _example(program, False))
    except Exception:  # noqa: BLE001 - torch's limits, not the optimizer's
        return None


def dynamo_graph(program: Program, dynamic: bool = False, grad: bool = False) -> torch.fx.GraphModule | None:
    """The program as Dynamo captures it, with static shapes or with every size it does not
    specialize symbolic, from inputs that require grad or not (None: Dynamo does not export it
    as one graph, or its shapes are wrong)."""
    inputs = _example(program, grad)
    try:
        if not dynamic:
            return capture(program.module(), inputs)
        graph = torch._dynamo.export(program.module(), assume_static_by_default=False)(*inputs)[0]
    except Exception:  # noqa: BLE001 - Dynamo's limits, not the optimizer's
        return None
    return graph if _shapes_consistent(graph) else None


def _shapes_consistent(graph: torch.fx.GraphModule) -> bool:
    """Are the stacks' recorded shapes those of the cat of unsqueezed pieces they are?

    Not always, with symbolic sizes: torch 2.13 records ``stack([v], -2)`` of a (s0, s1 // 2)
    tensor as (s0, s1 // 2, 1) when s1 // 2 hints to 1 (``unsqueeze`` gets it right). The
    optimizer then rightly refuses a rewrite whose outputs disagree with the recorded shapes."""
    for node in graph.graph.nodes:
        if node.op != "call_function" or node.target is not torch.stack:
            continue
        bound = bind(node, "tensors", "dim", defaults={"dim": 0})
        pieces = [val(t) for t in bound["tensors"]] if bound else []
        if not pieces or not all(isinstance(t, FakeTensor) for t in pieces):
            continue
        with pieces[0].fake_mode:
            d = bound["dim"] % (pieces[0].dim() + 1)
            expected = torch.cat([t.unsqueeze(d) for t in pieces], d)
        if str(expected.shape) != str(val(node).shape):
            return False
    return True


def resized_inputs(graph: torch.fx.GraphModule, inputs: tuple[torch.Tensor, ...], gen: torch.Generator
                   ) -> tuple[torch.Tensor, ...] | None:
    """Fresh inputs in which every symbolic size of ``graph`` takes a new value (None: none is)."""
    placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"]
    sizes: dict[Any, int] = {}
    out = []
    for node, t in zip(placeholders, inputs):
        shape = []
        for s in val(node).shape:
            if static_int(s) is not None:
                shape.append(static_int(s))
            elif s.node.expr.is_Symbol:
                if s.node.expr not in sizes:
                    sizes[s.node.expr] = int(torch.randint(2, 13, (), generator=gen))
                shape.append(sizes[s.node.expr])
            else:
                return None
        out.append(torch.randn(shape, generator=gen).to(t.dtype))
    return tuple(out) if sizes else None


def check_program(program: Program, graph: torch.fx.GraphModule | None = None, grad: bool = False
                  ) -> torch.fx.GraphModule:
    """``optimize`` the program's graph (``graph``, or its ``fx.symbolic_trace``; a fallback fails,
    so does a budget hit), then compare it with the eager program on the example inputs and
    fresh ones: outputs (structure, shape, dtype, values), the inputs after the call (in-place
    writes), which inputs and outputs each output aliases, and with ``grad`` the inputs'
    gradients of a random weighted sum of the outputs (the graph should then be captured from
    inputs that require grad: ``fx.symbolic_trace`` records no grad flags, Dynamo does). A graph
    with symbolic sizes is also run on inputs of other sizes (those Dynamo's guards on the graph
    admit). A second ``optimize`` of the graph, mostly served from the cache, must return the
    same graph."""
    model = program.module()
    graph = program.graph_module() if graph is None else graph
    guards = _guards(graph)
    try:
        gm, report = optimize(graph, _example(program, grad))  # the default budget
    except Exception as exc:  # noqa: BLE001 - report it with the program that caused it
        raise AssertionError(f"optimize fell back on a valid program: {type(exc).__name__}: {exc}") from exc
    assert report.fallback is None, report.fallback
    # A program this small saturates in milliseconds: a budget hit is a rule set that loops or blows up.
    assert report.stop_reason in ("saturated", ""), report.summary()  # "": nothing searched
    # Again, from the cache (keyed by the graph's rows, translated anew): the same graph back. Not
    # where the first run added guards to the graph's sizes: fake-running the emitted graph may
    # (``narrow(x, 1, 0, 3) + ...`` of an ``x`` of ``s0`` columns: its strides equal a contiguous
    # tensor's only if ``s0 == 3``, and torch guards so; seed 1919), and the graph is then another.
    if _guards(graph) == guards:
        again, second = optimize(graph, _example(program, grad))
        assert again.code == gm.code, f"served from the cache ({second.cache_hit}):\n{again.code}\nsearched:\n{gm.code}"
    params = [b for _, b in sorted(model.named_buffers())], [b for _, b in sorted(gm.named_buffers())]
    gen = torch.Generator().manual_seed(len(program.source))
    for trial in range(TRIALS):
        args = program.inputs if trial == 0 else tuple(_fresh(t, gen) for t in program.inputs)
        _compare(model, gm, args, params, grad)
    resized = resized_inputs(graph, program.inputs, gen)
    if resized is not None and _within_guards(graph, resized) and _eager_runs(model, resized):
        _compare(model, gm, resized, params, grad)
    return gm


def _shape_env(graph: torch.fx.GraphModule) -> Any:
    """The shape environment of the graph's inputs' fake values (None: no fake inputs)."""
    fakes = (val(n) for n in graph.graph.nodes if n.op == "placeholder")
    return next((v.fake_mode.shape_env for v in fakes if isinstance(v, FakeTensor)), None)


def _guards(graph: torch.fx.GraphModule) -> int:
    """How many guards the graph's shape environment holds (0 without symbolic sizes)."""
    env = _shape_env(graph)
    return len(env.guards) if env is not None else 0


def check_compiled(program: Program, backend: Any = "optimus_egg", reference: Any = "inductor") -> bool:
    """``torch.compile(backend="optimus_egg")`` (Dynamo, the optimizer, AOTAutograd, Inductor)
    against eager: outputs and in-place writes to the inputs, within Inductor's own rounding
    (it computes half precision in float32 and fuses). Inductor is told to round where a cast
    to a narrower dtype says so; by default it skips that (``x.half().double()`` is ``x``), and
    to draw random numbers as eager does (``fallback_random``), so a dropout's mask is eager's
    under one seed.

    False (not judged) where ``reference`` (plain Inductor), compiled in the same state, differs
    from eager as well: programs of one source share their code, so Dynamo recompiles a later
    one with dynamic shapes, and torch 2.13's and 2.14's Inductor then computed ``linear`` of a
    row of ``cat([v7] * 5, -2)`` wrongly on its own (seed 1818, with the optimizer keeping the
    graph as written; torch 2.15 computes it right); and where Dynamo cannot trace the program
    itself, or AOTAutograd not (:func:`_returns_a_view_and_its_detach`). ``backend`` and
    ``reference`` are what ``torch.compile`` takes."""
    model = program.module()
    if _returns_a_view_and_its_detach(program, grad=False):
        return False
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    gen = torch.Generator().manual_seed(len(program.source))
    for args in (program.inputs, tuple(_fresh(t, gen) for t in program.inputs)):
        try:
            _compiled_matches(model, compiled, args)
        except torch._dynamo.exc.TorchRuntimeError:  # Dynamo's own fake run of the program, before
            return False  # any backend (torch 2.11: a split of an empty tensor; see traced_graph)
        except AssertionError:
            try:
                _compiled_matches(model, torch.compile(model, backend=reference, fullgraph=True), args)
            except AssertionError:
                return False
            raise
    return True


def _compiled_matches(model: torch.nn.Module, compiled: Any, args: tuple[torch.Tensor, ...]) -> None:
    eager_args, compiled_args = [t.clone() for t in args], [t.clone() for t in args]
    with inductor_config.patch(emulate_precision_casts=True, fallback_random=True):
        expected, got = _seeded(model, eager_args), _seeded(compiled, compiled_args)
    leaves_e, spec_e = pytree.tree_flatten(expected)
    leaves_g, spec_g = pytree.tree_flatten(got)
    assert spec_e == spec_g, f"output structure {spec_g} != {spec_e}"
    for i, (e, g) in enumerate([*zip(leaves_e, leaves_g), *zip(eager_args, compiled_args)]):
        tol = 1e-2 if e.dtype in (torch.float16, torch.bfloat16) else 1e-4
        torch.testing.assert_close(g, e, equal_nan=True, rtol=tol, atol=tol,
                                   msg=lambda m, i=i: f"output or input {i}: {m}")


def check_backward(program: Program) -> bool:
    """As the backend does it, without Inductor: Dynamo's graph optimized, then the backward
    graph AOTAutograd derives from it with Inductor's decompositions (what the post-grad
    ``BackwardPass`` rewrites) optimized as that pass does it; against eager's outputs and input
    gradients. False where eager cannot differentiate the program (an in-place write to a leaf),
    and where the program draws random numbers and the same pipeline without the optimizer
    draws other ones than eager: AOTAutograd drops a dropout nothing reads, and the next one
    draws its numbers (seed 303); and where Dynamo cannot trace the program itself."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func
    from torch._inductor.decomposition import select_decomp_table

    from optimus_egg.pipeline import optimize_graph

    def backward(gm: torch.fx.GraphModule, _: Any) -> Any:
        return make_boxed_func(optimize_graph(gm, disjoint_outputs=True)[0])

    model = program.module()
    args_e, args_g = _example(program, True), _example(program, True)
    try:
        expected = pytree.tree_leaves(_seeded(model, args_e))
    except RuntimeError:
        return False
    if _returns_a_view_and_its_detach(program, grad=True):
        return False
    with inductor_config.patch(fallback_random=True):  # dropouts draw as eager's (check_compiled)
        decompositions = select_decomp_table()

    def compiled(optimized: bool) -> torch.nn.Module:
        bw = backward if optimized else (lambda gm, _: make_boxed_func(gm))
        aot = aot_autograd(fw_compiler=lambda gm, _: make_boxed_func(gm), bw_compiler=bw,
                           decompositions=decompositions)
        torch._dynamo.reset()
        return _Compiled(model, lambda gm, inputs: aot(optimize_graph(gm)[0] if optimized else gm, inputs))

    try:
        if _RANDOM.search(program.source):
            plain = pytree.tree_leaves(_seeded(compiled(False), _example(program, True)))
            try:
                torch.testing.assert_close(plain, expected, equal_nan=True)
            except AssertionError:
                return False
        optimized = compiled(True)
        got = pytree.tree_leaves(_seeded(optimized, args_g))
    except torch._dynamo.exc.TorchRuntimeError:  # Dynamo's own fake run (check_compiled)
        return False
    for i, (e, g) in enumerate(zip(expected, got, strict=True)):
        torch.testing.assert_close(g, e, equal_nan=True, msg=lambda m, i=i: f"output {i}: {m}")
    _check_grads(expected, args_e, got, args_g, (model, optimized))
    return True


class _Compiled(torch.nn.Module):
    """``inner`` under ``torch.compile`` with ``backend``, compiled at the call: a copy of it in
    float64 (:func:`_check_grads`) is compiled, and optimized, as itself."""

    def __init__(self, inner: torch.nn.Module, backend: Any) -> None:
        super().__init__()
        self.inner, self.backend = inner, backend

    def forward(self, *args: Any) -> Any:
        return torch.compile(self.inner, backend=self.backend, fullgraph=True)(*args)


def _returns_a_view_and_its_detach(program: Program, grad: bool) -> bool:
    """Does the graph, as written, return a view of a computed tensor and that view detached?
    AOTAutograd (torch 2.13) fails replaying such outputs, with or without the optimizer (a
    segmentation fault from ``v = (x * 2)[:, 6:9]; return v.detach(), v`` under ``aot_eager``,
    seed 404). A fresh tensor and its detach (``y.detach(), y``) are checked: the rewrite must
    not make ``y`` such a view (:func:`optimus_egg.outputs._detached_twins`). Only a program that
    says ``detach`` is captured to look."""
    graph = dynamo_graph(program, grad=grad) if "detach" in program.source else None
    if graph is None:
        return False
    inputs = {storage_key(val(n)) for n in graph.graph.find_nodes(op="placeholder")}
    outputs = pytree.tree_leaves(next(iter(graph.graph.find_nodes(op="output"))).args)
    return _detached_twins([v for n in outputs if isinstance(n, torch.fx.Node)
                            and isinstance(v := val(n), torch.Tensor) and storage_key(v) not in inputs])


#: Calls the fuzzer writes that draw random numbers (``tests/fuzz/ops.py``).
_RANDOM = re.compile(r"dropout|rand|bernoulli")


def _eager_runs(model: torch.nn.Module, args: tuple[torch.Tensor, ...]) -> bool:
    """Some bounds are checked when the program runs, not guarded (an index list into a dim)."""
    try:
        _seeded(model, [t.clone() for t in args])
    except (IndexError, RuntimeError):
        return False
    return True


def _within_guards(graph: torch.fx.GraphModule, args: tuple[torch.Tensor, ...]) -> bool:
    """Do these inputs satisfy the guards Dynamo put on the graph's symbolic sizes? Not where
    a guard cannot be evaluated on them (a size divided by one that resizing made 0; seed 606)."""
    env = _shape_env(graph)
    fakes = [val(n) for n in graph.graph.nodes if n.op == "placeholder"]
    try:
        return env is not None and env.evaluate_guards_for_args(fakes, list(args))
    except ZeroDivisionError:
        return False


def _seeded(fn: torch.nn.Module, args: list[torch.Tensor]) -> Any:
    """Run with the same random stream every time: random ops must keep their order."""
    torch.manual_seed(0)
    return fn(*args)


def _compare(model: torch.nn.Module, gm: torch.fx.GraphModule, args: tuple[torch.Tensor, ...],
             params: tuple[list[torch.Tensor], list[torch.Tensor]], grad: bool) -> None:
    eager_args = [t.clone().requires_grad_(grad and t.is_floating_point()) for t in args]
    opt_args = [t.clone().requires_grad_(grad and t.is_floating_point()) for t in args]
    with _Rounding():
        expected = _seeded(model, eager_args)
    got = _seeded(gm, opt_args)
    leaves_e, spec_e = pytree.tree_flatten(expected)
    leaves_g, spec_g = pytree.tree_flatten(got)
    assert spec_e == spec_g, f"output structure {spec_g} != {spec_e}"
    for i, (e, g) in enumerate(zip(leaves_e, leaves_g)):
        torch.testing.assert_close(g, e, equal_nan=True, **_tolerance(e), msg=lambda m, i=i: f"output {i}: {m}")
        assert _layout(g) == _layout(e), f"output {i} laid out as {g.stride()}, eager {e.stride()}"
    for i, (e, g) in enumerate(zip(eager_args, opt_args)):
        torch.testing.assert_close(g, e, equal_nan=True, **_tolerance(e),
                                   msg=lambda m, i=i: f"input {i} after the call: {m}")
    alias_e = aliases(leaves_e, eager_args + params[0])
    alias_g = aliases(leaves_g, opt_args + params[1])
    assert alias_g == alias_e, f"aliasing per output: optimized {alias_g}, eager {alias_e}"
    if grad:
        flags_e, flags_g = ([getattr(t, "requires_grad", None) for t in ls] for ls in (leaves_e, leaves_g))
        assert flags_g == flags_e, f"outputs requiring grad: optimized {flags_g}, eager {flags_e}"
        _check_grads(leaves_e, eager_args, leaves_g, opt_args, (model, gm))


#: ``torch.testing.assert_close``'s default tolerances (rtol, atol) per floating dtype.
_TOLERANCES = {torch.bfloat16: (1.6e-2, 1e-5), torch.float16: (1e-3, 1e-5), torch.float32: (1.3e-6, 1e-5),
               torch.float64: (1e-7, 1e-7)}


def _rounded_in(t: torch.Tensor) -> torch.dtype | None:
    return getattr(t, "_rounded_in", t.dtype if t.dtype in _TOLERANCES else None)


def _coarsest(dtypes: list[torch.dtype | None]) -> torch.dtype | None:
    return max((d for d in dtypes if d is not None), key=lambda d: torch.finfo(d).eps, default=None)


class _Rounding(TorchDispatchMode):
    """Marks each floating value a program computes with the least precise floating dtype among
    its own and its operands' marks (``_rounded_in``; an input's is its dtype): a float64 result
    of float32 values carries float32's rounding."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        operands = [_rounded_in(t) for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.dtype in _TOLERANCES:
                t._rounded_in = _coarsest([*operands, t.dtype])
        return out


def _tolerance(t: Any) -> dict[str, float]:
    """A float64 output made of float32 values carries float32's rounding: a kernel may round
    otherwise on another layout (CPU's vectorized ``gelu`` of a whole tensor and its scalar loop
    over a strided piece differ by 7e-7; seed 909). Judged at the tolerance of the least precise
    dtype its value was computed through (:class:`_Rounding`), where that is coarser than its own."""
    if not isinstance(t, torch.Tensor) or (rounded := _rounded_in(t)) is None or rounded == t.dtype:
        return {}
    rtol, atol = _TOLERANCES[_coarsest([rounded, t.dtype])]
    return {"rtol": rtol, "atol": atol}


def _layout(t: Any) -> Any:
    """Strides where they matter (dims of more than one element): a caller's view() of an
    output works or fails on them."""
    if not isinstance(t, torch.Tensor) or not t.numel():
        return None
    return [st for n, st in zip(t.shape, t.stride()) if n != 1]


def _check_grads(leaves_e: list[Any], args_e: list[torch.Tensor], leaves_g: list[Any], args_g: list[torch.Tensor],
                 programs: tuple[torch.nn.Module, torch.nn.Module] | None = None) -> None:
    """Gradients of one random weighted sum of the outputs, on both sides: None (no gradient)
    where eager has None, and equal values elsewhere (zeros included: an input whose every use
    is optimized away, the other pieces of ``cat([a, b])[:, :n]``, still gets eager's zeros).

    ``programs`` (eager's and the optimized one) judge gradients that differ beyond
    ``assert_close``'s tolerance: both programs run again in float64 (inputs and buffers), where their
    gradients must agree at float64's tolerance. A gradient that cancels terms, summed in
    another order, is off by their rounding: that of ``x / x`` is ``1/x - x/x²``, terms of ~100
    where x is 0.01, and the optimized graph's was 2.3e-5 from eager's in float32, where the
    tolerance around 0 is 1e-5 (seed 63), and 2e-16 in float64. In bfloat16, the gradient of
    ``relu(gelu(x))`` returned at three points, terms of ~2, was one unit of their last place off
    (0.0156, tolerance 0.01; seed 63). A rewrite that changes values differs in float64 as much.
    A float32 input whose gradient flows back from half-precision outputs is judged at their
    tolerance: its terms were summed in float16 (one unit of float16's last place at 2.9,
    0.002, was beyond float32's tolerance; seed 303, backward flavour)."""
    weights = [torch.randn(e.shape).to(e.dtype) if e.requires_grad else None for e in leaves_e]
    for leaves in (leaves_e, leaves_g):
        _backward(leaves, weights)
    half = (torch.float16, torch.bfloat16)
    through_half = any(w is not None and e.dtype in half for e, w in zip(leaves_e, weights))
    wide: tuple[list[Any], list[Any]] | None = None
    for i, (e, g) in enumerate(zip(args_e, args_g)):
        assert (g.grad is None) == (e.grad is None), f"grad of input {i}: optimized {g.grad}, eager {e.grad}"
        if e.grad is None:
            continue
        grad_e, grad_g = e.grad, g.grad
        tol = {"rtol": 1e-2, "atol": 1e-2} if e.dtype in half or through_half else {}  # summed in another order
        try:
            torch.testing.assert_close(grad_g, grad_e, equal_nan=True, **tol, msg=lambda m, i=i: f"grad of input {i}: {m}")
        except AssertionError:
            if programs is None:
                raise
            wide = wide or tuple(_float64_grads(f, args_e, weights) for f in programs)
            if wide[0] is None or wide[1] is None:
                raise
            torch.testing.assert_close(wide[1][i], wide[0][i], equal_nan=True,
                                       msg=lambda m, i=i: f"grad of input {i}, in float64: {m}")


def _backward(leaves: list[Any], weights: list[torch.Tensor | None]) -> None:
    terms = [(o * w.to(o.dtype)).sum() for o, w in zip(leaves, weights) if w is not None]
    if terms:
        torch.stack(terms).sum().backward()


def _float64_grads(program: torch.nn.Module, args: list[torch.Tensor], weights: list[torch.Tensor | None]
                   ) -> list[torch.Tensor | None] | None:
    """The inputs' gradients with every floating input and buffer in float64 (None: the program
    does not run so, or its outputs are not all float64 where the others required grad)."""
    wide = [t.detach().double().requires_grad_(t.requires_grad) if t.is_floating_point() else t.detach().clone()
            for t in args]
    module = copy.deepcopy(program).double()
    module._forward_pre_hooks.clear()  # optimize's check of the arguments' dtypes (a copy's own)
    try:
        leaves = pytree.tree_leaves(_seeded(module, wide))
    except RuntimeError:
        return None
    if len(leaves) != len(weights) or any(w is not None and (not isinstance(o, torch.Tensor) or o.dtype != torch.float64)
                                          for o, w in zip(leaves, weights)):
        return None
    _backward(leaves, weights)
    return [t.grad for t in wide]
