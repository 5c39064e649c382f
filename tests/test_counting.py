"""Kernel counting: which ATen ops are launches, and the calls of Inductor's wrapper."""

import torch
import torch.nn.functional as F

from optimus_egg.counting import eager_launches, wrapper_extern_calls, wrapper_launches


def test_views_and_allocations_launch_nothing():
    x = torch.randn(4, 6)
    assert eager_launches(lambda: (x.view(2, 12), x.t(), x[1:], x.split(2, dim=1))) == 0
    assert eager_launches(lambda: (torch.empty_like(x), x.new_empty(3), torch.empty(2, 2))) == 0


def test_a_view_the_schema_leaves_unmarked_launches_nothing():
    """``linear`` without bias on a 3-D input runs ``mm`` and returns its ``_unsafe_view``."""
    x, w = torch.randn(2, 3, 4), torch.randn(5, 4)
    assert eager_launches(F.linear, x, w) == 1
    assert eager_launches(F.linear, x, w, torch.randn(5)) == 1


def test_an_in_place_op_is_a_launch():
    x = torch.randn(4, 6)
    assert eager_launches(lambda: x.clone().relu_().mul_(2)) == 3
    assert eager_launches(lambda: torch.zeros(3)) == 1  # a fill


WRAPPER = '''
def call(args):
    arg0_1, = args
    buf0 = empty_strided_cpu((4, 4), (4, 1), torch.float32)
    cpp_fused_relu_0(arg0_1, buf0)
    buf1 = empty_strided_cpu((4, 4), (4, 1), torch.float32)
    extern_kernels.mm(buf0, arg0_1, out=buf1)
    triton_poi_fused_1.run(buf1, 16, stream=stream0)
    return (buf1, )


def benchmark_compiled_module(times=10, repeat=10):
    cpp_fused_relu_0(None, None)
'''


def test_wrapper_launches_are_the_kernel_calls_of_call_alone():
    assert wrapper_launches(WRAPPER) == 3
    assert wrapper_extern_calls(WRAPPER) == 1  # the mm (not the relu, not the Triton kernel)
    assert wrapper_launches("print('no call function')") == 0 == wrapper_extern_calls("x = 1")
