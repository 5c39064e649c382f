"""Measure the optimizer on wide graphs: ``python -m optimus_egg.bench.wide 100 200 400``.

N towers side by side (:class:`~optimus_egg.bench.models.WideTowers`), where the chain benchmark
(:mod:`optimus_egg.bench.chain`) is one op wide and N blocks deep. Horizontal fusion groups the N
linears into one ``baddbmm``; its seed rules chain the members one per round, so here the search
grows with the width. ``--shape inputs``: the towers on N inputs of their own; ``--shape
sequence``: N items unbound, an op on each, stacked back. Prints eager launches before and
after, the e-graph, the optimizer's phases (the median of ``--reps`` searches) and Dynamo's
capture time as the yardstick, as the chain benchmark does.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import replace

from optimus_egg.bench.chain import STRICT, searched
from optimus_egg.bench.models import WIDE_SHAPES, wide
from optimus_egg.cli_options import positive_int
from optimus_egg.extract.select import COST_MODELS


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("towers", type=positive_int, nargs="+")
    parser.add_argument("--reps", type=positive_int, default=3, help="optimize runs (median)")
    parser.add_argument("--shape", choices=sorted(WIDE_SHAPES), default="towers")
    parser.add_argument("--cost-model", choices=sorted(COST_MODELS), default="eager",
                        help="what extraction minimizes (default: eager launches, what a GPU pays for N "
                        "towers; on CPU the default inductor model keeps linears that addmm writes in place)")
    args = parser.parse_args(argv)
    for n in args.towers:
        # (memory_bound off: the towers' weights require grad, and the bound would keep a
        # training graph unbatched; this measures the batching search)
        options = replace(STRICT, cost_model=args.cost_model, memory_bound=False)
        print(searched(n, *wide(n, shape=args.shape)(), args.reps, options=options))


if __name__ == "__main__":
    main()
