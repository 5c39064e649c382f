"""optimus_egg.fake_values: the values emitted nodes carry (the emitter's use of them is tested
in test_emit.py)."""

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from optimus_egg.fake_values import value_key


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
