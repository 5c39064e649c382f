"""The order a rewritten backward graph goes to Inductor in (optimus_egg.post_grad)."""

import torch

from optimus_egg.emit import ORIGIN
from optimus_egg.post_grad import order_as_written


def test_a_graph_reordered_as_written_keeps_the_original_order_and_puts_new_nodes_before_readers():
    original = torch.fx.symbolic_trace(lambda x, y: (torch.relu(x), torch.tanh(y), torch.sigmoid(x))).graph
    graph = torch.fx.Graph()
    x, y = graph.placeholder("x"), graph.placeholder("y")
    sig = graph.call_function(torch.sigmoid, (x,))  # emitted depth-first: the last output first
    cat = graph.call_function(torch.cat, ([x, y],))  # new, read by the tanh only
    tanh = graph.call_function(torch.tanh, (cat,))
    relu = graph.call_function(torch.relu, (x,))
    graph.output((relu, tanh, sig))
    for node, name in ((sig, "sigmoid"), (tanh, "tanh"), (relu, "relu")):
        node.meta[ORIGIN] = [name]
    order_as_written(graph, original)
    assert [n.name for n in graph.nodes] == ["x", "y", "relu", "cat", "tanh", "sigmoid", "output"]
    graph.lint()


def _weight_gradients_graph(read_by=None):
    """The program ``mm(a, b)``, ``sum(a)``, ``mm(c, d)``, ``tanh(c)`` (all returned), and that
    program with both matmuls batched into one new ``bmm``, each an emitted ``select`` of it,
    emitted depth-first. ``read_by``: a function of the bmm that the output also returns."""
    def program(a, b, c, d):
        return torch.mm(a, b), torch.sum(a, 0), torch.mm(c, d), torch.tanh(c)

    original = torch.fx.symbolic_trace(program).graph
    graph = torch.fx.Graph()
    a, b, c, d = (graph.placeholder(name) for name in "abcd")
    xs = graph.call_function(torch.stack, ([a, c],))
    ws = graph.call_function(torch.stack, ([b, d],))
    bmm = graph.call_function(torch.bmm, (xs, ws))
    mm, mm_1 = (graph.call_function(torch.select, (bmm, 0, i)) for i in range(2))
    tanh = graph.call_function(torch.tanh, (c,))
    total = graph.call_function(torch.sum, (a, 0))
    extra = (read_by(graph, bmm),) if read_by else ()
    graph.output((mm, total, mm_1, tanh, *extra))
    for node, name in ((mm, "mm"), (total, "sum_1"), (mm_1, "mm_1"), (tanh, "tanh")):
        node.meta[ORIGIN] = [name]
    return graph, original


def test_a_new_matmul_that_only_the_output_reads_is_reordered_last_with_its_views():
    """The bmm of weight gradients once went as soon as its operands were ready, as its first
    reader (the first gradient) was written: Inductor (CPU) then wrote the kernels after it that
    need not wait for it (a bias gradient) as a launch of their own."""
    graph, original = _weight_gradients_graph()
    order_as_written(graph, original)
    assert [n.name for n in graph.nodes] == ["a", "b", "c", "d", "stack", "stack_1", "sum_1", "tanh", "bmm",
                                             "select", "select_1", "output"]
    graph.lint()


def test_a_new_matmul_that_a_kernel_reads_is_not_reordered_last():
    graph, original = _weight_gradients_graph(lambda g, bmm: g.call_function(torch.relu, (bmm,)))
    order_as_written(graph, original)
    order = [n.name for n in graph.nodes]
    assert order.index("bmm") < order.index("sum_1")  # as written: before its first reader
    graph.lint()


def test_an_original_matmul_that_only_the_output_reads_stays_where_it_was():
    original = torch.fx.symbolic_trace(lambda a, b: (torch.mm(a, b), torch.sum(a, 0))).graph
    graph = torch.fx.Graph()
    a, b = graph.placeholder("a"), graph.placeholder("b")
    total = graph.call_function(torch.sum, (a, 0))  # emitted depth-first: the last output first
    mm = graph.call_function(torch.mm, (a, b))
    graph.output((mm, total))
    mm.meta[ORIGIN], total.meta[ORIGIN] = ["mm"], ["sum_1"]
    order_as_written(graph, original)
    assert [n.name for n in graph.nodes] == ["a", "b", "mm", "sum_1", "output"]


def test_a_call_that_reads_only_what_a_matmul_reads_goes_before_it():
    """A layer's bias gradient (the sum of the gradient a matmul reads) is written after the
    matmul: on CPU it ran in the next layer's C++ kernel instead of in the one that computed
    the gradient."""
    def program(a, w, b):
        g = torch.tanh(a)
        h = torch.sigmoid(torch.mm(g, w))
        m = torch.mm(h, w)
        return m, torch.sum(g, 0), torch.sum(h, 0), torch.sum(torch.relu(h + g), 0), torch.relu(b), torch.sum(g[:, :2], 0)

    original = torch.fx.symbolic_trace(program).graph
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(original, {}))
    for n in graph.nodes:
        if n.op == "call_function":
            n.meta[ORIGIN] = [n.name]
    order_as_written(graph, original)
    # sum_1 of the first matmul's g and sum_2 of the second's h go before them; not what also
    # reads g (add), nor another slice of g (getitem), nor relu_1 of an input alone
    assert [n.name for n in graph.nodes if n.op == "call_function"] == [
        "tanh", "sum_1", "mm", "sigmoid", "sum_2", "mm_1", "add", "relu", "sum_3", "relu_1", "getitem", "sum_4"]
    graph.lint()
