"""ATen emission (optimus_egg.aten): every torch call the emitter writes has an ATen spelling that
computes the same."""

import pytest
import torch

from optimus_egg import aten


@pytest.mark.parametrize("target", list(aten.ATEN_CALLS), ids=lambda t: t.__name__)
def test_every_torch_call_the_emitter_writes_has_an_aten_spelling(target):
    x, w = torch.randn(3, 4, 6), torch.randn(3, 6, 4)
    args = {torch.narrow: (x, 2, 1, 3), torch.select: (x, 1, 2), torch.squeeze: (x[:, :1], 1),
            torch.unsqueeze: (x, 1), torch.cat: ([x, x], 2), torch.stack: ([x, x], 1), torch.flatten: (x, 1, 2),
            torch.unflatten: (x, 2, (2, -1)), torch.split: (x, [2, 4], 2), torch.unbind: (x, 0),
            torch.clone: (x,), torch.bmm: (x, w), torch.baddbmm: (torch.randn(3, 4, 4), x, w),
            torch.transpose: (x, 1, 2), torch.movedim: (x, 2, 0), torch.addcmul: (x, x, x), torch.mul: (x, 2),
            torch.add: (x, x), torch.sum: (x, 2),
            torch.Tensor.contiguous: (x.transpose(1, 2),)}[target]
    graph = torch.fx.Graph()
    ins = {}

    def node(a):  # tensors become placeholders, anything else stays a constant
        if isinstance(a, list):
            return [node(b) for b in a]
        if isinstance(a, torch.Tensor):
            ins[id(a)] = ins.get(id(a)) or (a, graph.placeholder(f"x{len(ins)}"))
            return ins[id(a)][1]
        return a

    call = graph.call_function(target, tuple(node(a) for a in args))
    for t, p in ins.values():
        p.meta["val"] = t
    call.meta["val"] = target(*args)
    with graph.inserting_before(call):
        lowered = aten.ATEN_CALLS[target](graph, call)
    graph.output(lowered)
    got = torch.fx.GraphModule(torch.nn.Module(), graph)(*(t for t, _ in ins.values()))
    assert all(isinstance(n.target, torch._ops.OpOverload) for n in graph.nodes
               if n.op == "call_function" and n is not call)
    for a, b in zip(torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(target(*args))):
        torch.testing.assert_close(a, b)
