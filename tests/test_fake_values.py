"""optimus_egg.fake_values: the values emitted nodes carry (the emitter's use of them is tested
in test_emit.py)."""

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from optimus_egg import optimize
from optimus_egg.fake_values import fake_run, value_key
from tests.helpers import Fn


def test_a_call_reading_a_value_that_requires_grad_is_not_keyed():
    """Its result's grad flag would hang on the grad mode, which a fake run reads."""
    for grad in (False, True):
        with FakeTensorMode():
            x = torch.empty(3, requires_grad=grad)
        graph = torch.fx.Graph()
        placeholder = graph.placeholder("x")
        placeholder.meta["val"] = x
        relu = graph.call_function(torch.ops.aten.relu.default, (placeholder,))
        assert (value_key(relu) is None) == grad


def test_a_linear_of_a_slice_of_a_symbolic_tensor_is_fake_run():
    """torch 2.11's C++ linear asked a strided slice with symbolic sizes for its numel() and
    raised, outside the Python dispatcher (fuzzer, backend flavour, seed 3030: the rewritten
    graph of a dynamic-shape recompile fell back)."""
    from torch._dynamo.source import ConstantSource
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

    mode = FakeTensorMode(shape_env=ShapeEnv())
    x = mode.from_tensor(torch.randn(3, 11, 4), source=ConstantSource("x"),
                         symbolic_context=StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * 3))
    graph = torch.fx.Graph()
    nodes = [graph.placeholder(name) for name in ("x", "w", "b")]
    for node, value in zip(nodes, (x, mode.from_tensor(torch.randn(5, 4)), mode.from_tensor(torch.randn(5)))):
        node.meta["val"] = value
    piece = graph.call_function(torch.ops.aten.slice.Tensor, (nodes[0], 1, 2, 3))
    fake_run(piece)
    linear = graph.call_function(torch.nn.functional.linear, (piece, *nodes[1:]))
    fake_run(linear)
    assert linear.meta["val"].shape[1:] == (1, 5) and isinstance(linear.meta["val"].shape[0], torch.SymInt)


class _Cube(torch.autograd.Function):
    """x ** 3 with a backward of its own (not the true gradient: it must be the one that runs)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 5 * g * x


def test_a_higher_order_op_is_fake_run_with_its_subgraphs():
    """Dynamo writes an autograd.Function as a higher-order op reading its bodies (get_attr
    submodules, without fake values): a re-emitted call was fake-run with None for them, and
    the compile fell back."""
    fn = lambda x: torch.cat([_Cube.apply(p).relu() for p in x.split(4, 1)], 1)  # noqa: E731
    x = torch.randn(5, 12)
    gm, report = optimize(Fn(fn), (x.clone().requires_grad_(),), cost_model="eager")
    assert report.fallback is None and report.kernels_after < report.kernels_before
    grads = []
    for f in (fn, gm):
        arg = x.clone().requires_grad_()
        out = f(arg)
        out.sum().backward()
        grads.append((out, arg.grad))
    torch.testing.assert_close(grads[1], grads[0])


def test_an_off_dropout_is_its_input_and_the_views_below_it_alias_the_input():
    """Dynamo gives ``F.dropout(x, training=False)`` a fresh value, though it returns ``x``
    itself: the pieces of a split of it were returned as copies, where eager's alias ``x``
    (fuzzer, seed 505). The values now say what eager does, and the optimized graph does it."""
    import torch.nn.functional as F

    def fn(x):
        return torch.cat([p.relu() for p in x.split(1, 1)], 1), F.dropout(x, 0.2, training=False).split(1, 0)

    x = torch.randn(2, 3)
    gm, report = optimize(Fn(fn), (x,))
    assert not report.kept
    glued, pieces = gm(x)
    torch.testing.assert_close(glued, x.relu())
    for i, piece in enumerate(pieces):
        torch.testing.assert_close(piece, x[i:i + 1])
        assert piece.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()  # a view of x, as in eager


def test_an_off_dropout_under_no_grad_keeps_its_own_value():
    """Dynamo's values for views taken under ``no_grad`` say they require grad (eager's do not),
    and its dropout's value rightly not: taking the input's value there made the cat after the
    block require grad, and the optimizer refused the graph (fuzzer, seed 606, strict)."""
    from tests.fuzz.check import check_program, dynamo_graph
    from tests.fuzz.programs import Program

    src = ("def forward(self, x0, x1):\n    with torch.no_grad():\n        v0 = x1[..., :]\n"
           "        v1 = torch.split(v0, 1, 0)\n        v2 = v1[-1]\n        v3 = F.dropout(v2, 0.2, training=False)\n"
           "    v4 = torch.cat([v3], 0)\n    return (v4, v1,)\n")
    program = Program(src, (torch.tensor([1.5410]), torch.tensor([-0.2934])))
    check_program(program, dynamo_graph(program, grad=True), grad=True)
