"""An einsum that contracts one dim is a broadcast multiply and a sum.

``einsum("bcd,bcde->bce", x, w) → (x.unsqueeze(-1) * w).sum(2)`` (Optimus'
einsum_to_pointwise_pass; any four distinct letters, :func:`optimus_egg.calls.contracts_last`
decides, and the op table keys only such einsums as ``einsum``). Eager runs the einsum as one
``bmm`` and the product form as two kernels; Inductor on CUDA keeps that ``bmm`` an extern call,
where the product form is one reduction kernel that the ops around it fuse into. The extractor
chooses (see :mod:`optimus_egg.extract.inductor`).

Only where it is the same computation: both operands of one floating dtype that rounds the
products as the ``bmm`` does (not float16/bfloat16, whose products would be rounded to half
precision before the sum), and the shared dims of equal static sizes (no broadcasting).
"""

from optimus_egg.calls import built
from optimus_egg.rewrites import Derive, one_of, op_named

#: The dtypes the product form computes as the einsum does (a product of two half-precision
#: numbers rounded to half precision before the sum is not what ``bmm`` computes).
EXACT = ("float32", "float64")


#: x: [b, c, d], w: [b, c, d, e]; t = einsum(x, w): [b, c, e].
EINSUM = ("(= t (Op k (Cons x (Cons w (Nil) -1) -1)))", op_named("k", "einsum"), "(= 3 (rank x))",
          "(= 4 (rank w))", *(f"(= {n} (size x {i}))" for i, n in enumerate("bcd")),
          *(f"(= {n} (size w {i}))" for i, n in enumerate("bcde")), "(= dt (dtype x))", "(= dt (dtype w))",
          one_of("dt", EXACT))
PRODUCT = f"(Op {built('mul')} (Cons (Unsqueeze x 3) (Cons w (Nil) -1) -1))"  # [b, c, d, e]

RULES = [
    Derive("einsum-as-product-sum", EINSUM,
           (f"(let p {PRODUCT})", '(union t (Op (+ k "-sum") (Cons p (Nil) -1)))', "(set (rank p) 4)",
            *(f"(set (size p {i}) {n})" for i, n in enumerate("bcde")), "(set (dtype p) dt)"),
           stage="seed", covers="einsum_to_pointwise_pass"),
]
