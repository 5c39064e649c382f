"""Property-based fuzzing: ``optimize`` on random split/cat/view/pointwise/linear programs.

Each drawn program (``programs.py``) is traced to an FX graph, optimized (a fallback is a
failure: the conftest makes it raise), and run beside the eager program on its example inputs
and on fresh random ones (``check.py``). Outputs must match in structure, shape, dtype and value;
inputs written by in-place ops must end up the same; and an output must alias exactly the inputs
and other outputs it aliases in eager. ``--fuzz-examples N`` (or ``OPTIMUS_EGG_FUZZ_EXAMPLES``) sets the
number of programs, ``--fuzz-seed S`` draws a different stream than the reproducible default.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, seed, settings

from tests.fuzz.check import check_program
from tests.fuzz.programs import Program, programs

#: Each flavour's share of the examples.
SHARES = {"general": 0.6, "split_cat": 0.25, "mutation": 0.15}


@pytest.mark.parametrize("mix", sorted(SHARES))
def test_optimize_matches_eager_on_random_programs(mix: str, fuzz_examples: int, fuzz_seed: int | None) -> None:
    examples = max(1, round(fuzz_examples * SHARES[mix]))
    checked = 0

    @settings(max_examples=examples, database=None, derandomize=fuzz_seed is None, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                     HealthCheck.filter_too_much], print_blob=fuzz_seed is not None)
    @given(programs(mix))
    def run(program: Program) -> None:
        nonlocal checked
        check_program(program)
        checked += 1

    if fuzz_seed is not None:
        run = seed(fuzz_seed)(run)
    run()
    assert checked >= examples  # the generator did not run dry
