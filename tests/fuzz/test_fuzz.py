"""Property-based fuzzing: ``optimize`` on random split/cat/view/pointwise/linear programs.

Each drawn program (``programs.py``) is traced to an FX graph (``fx.symbolic_trace``, or Dynamo
for one flavour), optimized (a fallback is a failure: the conftest makes it raise; so is a
budget hit), and run beside the eager program on its example inputs and on fresh random ones
(``check.py``). Outputs must match in structure, shape, dtype and value (within the tolerance
of the least precise dtype the value was computed through); inputs written by in-place ops must
end up the same; an output must alias exactly the inputs and other outputs it aliases in eager;
and a second ``optimize`` of the graph (mostly a cache hit) must return the same graph. ``--fuzz-examples N`` (or ``OPTIMUS_EGG_FUZZ_EXAMPLES``) sets the number of
programs over all flavours (default 500); ``--fuzz-seed S`` draws another stream than the
reproducible default. A failure prints the shrunk program's source: paste it into a named test.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, seed, settings

from tests.fuzz.check import check_backward, check_compiled, check_program, dynamo_graph, traced_graph
from tests.fuzz.programs import Program, programs

#: Flavour -> (program mix, capture: fx.symbolic_trace (None), Dynamo with static or dynamic
#: shapes, the whole torch.compile backend, or AOTAutograd with the backward optimized as the
#: backend's post-grad pass does it; gradients checked; share of the examples).
FLAVOURS = {"general": ("general", None, False, 0.36), "split_cat": ("split_cat", None, False, 0.2),
            "mutation": ("mutation", None, False, 0.13), "dynamo": ("general", "static", False, 0.1),
            "dynamic": ("split_cat", "dynamic", False, 0.03), "grad": ("split_cat", "static", True, 0.1),
            "backend": ("split_cat", "compile", False, 0.02), "backward": ("split_cat", "backward", True, 0.04),
            "modes": ("modes", "static", True, 0.06)}


@pytest.mark.parametrize("flavour", sorted(FLAVOURS))
def test_optimize_matches_eager_on_random_programs(flavour: str, fuzz_examples: int, fuzz_seed: int | None) -> None:
    mix, dynamo, grad, share = FLAVOURS[flavour]
    examples = max(1, round(fuzz_examples * share))
    checked = 0

    @settings(max_examples=examples, database=None, derandomize=fuzz_seed is None, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                     HealthCheck.filter_too_much], print_blob=fuzz_seed is not None)
    @given(programs(mix))
    def run(program: Program) -> None:
        nonlocal checked
        if dynamo == "compile":
            assume(check_compiled(program))
        elif dynamo == "backward":
            assume(check_backward(program))
        else:
            graph = dynamo_graph(program, dynamo == "dynamic", grad) if dynamo else traced_graph(program)
            assume(graph is not None)
            check_program(program, graph, grad)
        checked += 1

    if fuzz_seed is not None:
        run = seed(fuzz_seed)(run)
    run()
    assert checked >= examples  # the generator did not run dry
