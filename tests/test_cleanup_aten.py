"""The clean-up passes on an ATen graph (optimus_egg.cleanup): a stack of inputs or weights is each
scattered into its slot, and a stack of transposed gradients is the transpose of their stack."""

import pytest
import torch


def _assert_untouched(rewrite, gm: torch.fx.GraphModule) -> None:
    """``rewrite`` (a graph pass returning what it replaced) replaces nothing and leaves every
    node as it was."""
    before = [(n.target, n.args) for n in gm.graph.nodes]
    assert rewrite(gm.graph) == {}
    assert [(n.target, n.args) for n in gm.graph.nodes] == before


def _stack_of_inputs(read=torch.bmm, pieces=(None, None, None)):
    """The ATen graph (fake values) of ``read`` of ``g`` (``[n, 6, 4]``) and a stack of inputs
    (``[4, 5]`` each; the saved inputs a backward's bmm of weight gradients stacks), each
    through its function in ``pieces`` (None: as it is), with the function and inputs it
    traces (-0.0, inf and nan among them)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def fn(g, *xs):
        return read(g, torch.cat([(f(x) if f else x).unsqueeze(0) for f, x in zip(pieces, xs)]))

    xs = [torch.randn(4, 5) for _ in pieces]
    xs[0][0, :3] = torch.tensor([-0.0, float("inf"), float("nan")])
    inputs = (torch.randn(len(pieces), 6, 4), *xs)
    return make_fx(fn, tracing_mode="fake")(*inputs), fn, inputs


def test_a_stack_of_inputs_a_bmm_reads_is_each_input_scattered_into_its_slot():
    """Inductor (CPU) copies each input of a cat in a kernel of its own, which fused with
    whichever kernel near it read the same input, or with none: the scatters are one kernel."""
    from optimus_egg.cleanup import scatter_input_stacks

    aten = torch.ops.aten
    gm, fn, inputs = _stack_of_inputs()
    [new] = scatter_input_stacks(gm.graph).values()
    gm.graph.lint()
    gm.recompile()
    [bmm] = gm.graph.find_nodes(op="call_function", target=aten.bmm.default)
    assert bmm.args[1] is new and not gm.graph.find_nodes(op="call_function", target=aten.cat.default)
    scatters = [new]
    while scatters[-1].target == aten.slice_scatter.default:
        scatters.append(scatters[-1].args[0])
    zeros = scatters.pop()
    assert zeros.target == aten.full.default and zeros.args == ([3, 4, 5], 0)
    xs = [n for n in gm.graph.find_nodes(op="placeholder")][1:]
    assert [(s.args[1].target, s.args[1].args, s.args[2:]) for s in reversed(scatters)] == [
        (aten.unsqueeze.default, (x, 0), (0, i, i + 1)) for i, x in enumerate(xs)]
    torch.testing.assert_close(gm(*inputs), fn(*inputs), rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("read", [lambda g, s: torch.bmm(g[1:], s[1:]),  # through a slice
                                  lambda g, s: torch.bmm(g, torch.ops.aten.alias(s))])
def test_a_stack_of_inputs_a_bmm_reads_through_any_view_is_scattered(read):
    """Which calls are views is the op table's to say (``calls.launches``), as for the rest of
    the emitter: a slice or an alias between the stack and the bmm reads no loop either."""
    from optimus_egg.cleanup import scatter_input_stacks

    gm, fn, inputs = _stack_of_inputs(read=read)
    assert scatter_input_stacks(gm.graph)
    gm.graph.lint()
    gm.recompile()
    assert not gm.graph.find_nodes(op="call_function", target=torch.ops.aten.cat.default)
    torch.testing.assert_close(gm(*inputs), fn(*inputs), rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("case", [
    dict(read=lambda g, s: s * 2),  # a kernel reads the stack: the copies join it
    dict(read=lambda g, s: (torch.bmm(g, s), s)),  # ... or the output returns it
    dict(pieces=(None, torch.tanh, None)),  # a kernel writes a piece: its copy joins that kernel
    dict(pieces=(None,) * 17),  # more than a few: each element would test its slot 17 times
])
def test_other_stacks_of_inputs_keep_their_cat(case):
    from optimus_egg.cleanup import scatter_input_stacks

    gm, _, _ = _stack_of_inputs(**case)
    _assert_untouched(scatter_input_stacks, gm)


def test_weights_concatenated_for_a_matmul_are_each_scattered_into_their_rows():
    """A forward's linears that read one input become one ``addmm`` of their weights, concatenated
    in every step; Inductor (CPU) copied each weight in a loop of its own (zoo ple inference:
    93 kernel objects, 63 scattered). Read through a view (``permute``), as a linear reads its
    weight."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from optimus_egg.cleanup import scatter_input_stacks

    aten = torch.ops.aten

    def fn(x, b, *ws):
        return torch.addmm(b, x, torch.cat(ws).t())

    rows = [3, 1, 4, 3]  # linears of different widths (zoo mmoe: gates and experts)
    ws = [torch.randn(n, 5) for n in rows]
    ws[1][0, :3] = torch.tensor([-0.0, float("inf"), float("nan")])
    inputs = (torch.randn(2, 5), torch.randn(sum(rows)), *ws)
    gm = make_fx(fn, tracing_mode="fake")(*inputs)
    [new] = scatter_input_stacks(gm.graph).values()
    gm.graph.lint()
    gm.recompile()
    assert not gm.graph.find_nodes(op="call_function", target=aten.cat.default)
    scatters = [new]
    while scatters[-1].target == aten.slice_scatter.default:
        scatters.append(scatters[-1].args[0])
    assert scatters.pop().args == ([11, 5], 0)
    assert [s.args[2:] for s in reversed(scatters)] == [(0, 0, 3), (0, 3, 4), (0, 4, 8), (0, 8, 11)]
    torch.testing.assert_close(gm(*inputs), fn(*inputs), rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("fn", [
    lambda x, b, w0, w1: torch.cat([w0, w1]).sum() * x,  # a kernel reads the cat: its copies join it
    lambda x, b, w0, w1: torch.addmm(b, x, torch.cat([w0, w1.unsqueeze(0)[0]]).t()),  # a piece not an input
    lambda x, b, w0, w1: torch.mm(torch.cat([w0, w1], 1).t(), w0),  # along dim 1
])
def test_other_concatenated_weights_keep_their_cat(fn):
    from torch.fx.experimental.proxy_tensor import make_fx

    from optimus_egg.cleanup import scatter_input_stacks

    gm = make_fx(fn, tracing_mode="fake")(torch.randn(2, 5), torch.randn(6), torch.randn(3, 5), torch.randn(3, 5))
    _assert_untouched(scatter_input_stacks, gm)


def _stack_of_transposes(piece=torch.tanh, read=torch.bmm, transposed=(True, True), n=5, inner=6):
    """The ATen graph (fake values) of ``read`` of a stack of ``piece(g).T`` (``g``: ``[6, n]``;
    the weight gradients a backward batches into one bmm) and ``x`` (``[2, inner, 3]``), with
    the function and inputs it traces."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def fn(a, b, x):
        pieces = [piece(g).t() if t else piece(g) for g, t in zip((a, b), transposed)]
        return read(torch.cat([p.unsqueeze(0) for p in pieces]), x)

    inputs = (torch.randn(6, n), torch.randn(6, n), torch.randn(2, inner, 3))
    return make_fx(fn, tracing_mode="fake")(*inputs), fn, inputs


def test_a_stack_of_transposed_gradients_a_bmm_reads_is_the_transpose_of_their_stack():
    """Inductor copies each piece into the stack; a copy of ``g.T`` walks ``g`` as the bias
    gradient's column sum does and took those sums out of the layers' kernels (CPU)."""
    from optimus_egg.cleanup import stack_untransposed

    gm, fn, inputs = _stack_of_transposes()
    [(old, new)] = stack_untransposed(gm.graph).items()
    gm.graph.lint()
    gm.recompile()
    aten = torch.ops.aten
    [bmm] = gm.graph.find_nodes(op="call_function", target=aten.bmm.default)
    assert bmm.args[0] is new and new.target == aten.permute.default and list(new.args[1]) == [0, 2, 1]
    stack = new.args[0]
    assert stack.target == aten.cat.default
    assert [(u.target, u.args[0].target) for u in stack.args[0]] == [(aten.unsqueeze.default, aten.tanh.default)] * 2
    assert not gm.graph.find_nodes(op="call_function", target=aten.t.default)
    torch.testing.assert_close(gm(*inputs), fn(*inputs))


def test_a_gradient_that_is_an_input_is_stacked_untransposed_with_the_others():
    """The last layer's gradient is the backward's input when no activation follows the layer
    (the tangent; zoo clean_chain): its copy is one loop in either layout, and the others still
    join the kernels that compute them (training there: 25 kernel objects, 31 when an input
    kept every piece transposed)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from optimus_egg.cleanup import stack_untransposed

    aten = torch.ops.aten

    def fn(a, b, x):
        return torch.bmm(torch.cat([a.t().unsqueeze(0), torch.tanh(b).t().unsqueeze(0)]), x)

    inputs = (torch.randn(6, 5), torch.randn(6, 5), torch.randn(2, 6, 3))
    gm = make_fx(fn, tracing_mode="fake")(*inputs)
    [new] = stack_untransposed(gm.graph).values()
    gm.graph.lint()
    gm.recompile()
    a = next(iter(gm.graph.find_nodes(op="placeholder")))
    assert [u.args[0] for u in new.args[0].args[0]][0] is a
    assert [u.args[0].target for u in new.args[0].args[0]][1] == aten.tanh.default
    torch.testing.assert_close(gm(*inputs), fn(*inputs))


@pytest.mark.parametrize("case", [
    dict(read=lambda s, x: s * 2),  # a kernel reads the stack: its layout is what it was
    dict(read=lambda s, x: (torch.bmm(s, x), s)),  # ... or the output returns it
    dict(piece=lambda g: g),  # inputs alone: no kernel writes any of them
    dict(piece=lambda g: torch.tanh(g)[:, 1:]),  # a view: nor here
    dict(piece=lambda g: torch.tanh(g).sum(0, keepdim=True), inner=1),  # [1, n]: its transpose moves nothing
    dict(transposed=(True, False), n=6),  # one piece is not a transpose
])
def test_other_stacks_keep_their_pieces(case):
    from optimus_egg.cleanup import stack_untransposed

    gm, _, _ = _stack_of_transposes(**case)
    _assert_untouched(stack_untransposed, gm)
