"""Calls that compute each row of their input on its own (a linear, a layer norm over the last
dim), on inputs of rank 3 or more, as the same call on its rows: ``call(x) = unflatten(call(
flatten(x, 0, 1)), 0, n)``, again until the rows are 2-D. The group rules (``horizontal``) batch
2-D calls only.

- A linear (``w`` 2-D, ``b`` 1-D: the output's leading dims are ``x``'s) only where dim 0 or 1
  of ``x`` has size 1: merging a size-1 dim is a view of a tensor of any strides, so the 2-D
  linear reads ``x`` where it lies (FiBiNET's ``[n, 1, k]`` field pieces). Merging two other
  dims is no view of a strided tensor (a piece of a split), and a library matmul would copy it.
- A layer norm over the last dim alone (a 1-D weight says so) on any input: Inductor's
  reduction reads the merged rows through any strides (it indexes them; nothing is copied).
  Where ``x`` is a slice of ``y`` along a later dim, its rows are that slice of ``y``'s rows, so
  the pieces of a split still tile one tensor for the tiled norm rules.

The call on the rows takes the place of the call as written (``row-call``): its ``pos``,
``height``, ``depth`` and ``output``, and its place in the calls of its key (``call-before``), so
that the group rules chain it like any member. It depends on what the call depends on, so no
call of its height reads it. The seed stage runs before the analysis: the rules give the views
they make, and the new call, their shape facts themselves (``merged``).
"""

from functools import partial

from optimus_egg.rewrites import Derive, analysis, args

DECLARATIONS = """
; row-call t c: c is the call t on the rows of t's input (its dims 0 and 1 merged)
(relation row-call (T T))
; merged v x d: v is x with dims d and d+1 as one
(relation merged (T T i64))
"""

seed = partial(Derive, stage="seed", covers="new")


def on_rows(name: str, call: str, params: tuple[str, ...], when: tuple[str, ...]) -> Derive:
    """Call ``t`` of key ``k`` on ``x`` (and ``params``) where ``when`` holds, as the call on the
    rows of ``x``."""
    c = f"(Op k {args('(Flat x 0)', *params)})"
    return seed(name, (call, "(= r (rank x))", "(> r 2)", "(= n (size x 0))", *when),
                (f"(let c {c})", "(union t (Unflat c 0 n))", "(union c (Flat t 0))", "(row-call t c)",
                 "(merged (Flat x 0) x 0)", "(merged c t 0)"))


#: One of x's two leading dims has size 1 (both: the rule fires twice, to one term).
UNIT_LEADING_DIM = ("(= 1 (size x u))", "(< u 2)")
RULES = [
    on_rows("linear-of-rows", "(call3 t k x w b)", ("w", "b"),
            ("(linear-key k)", "(= 2 (rank w))", "(= 1 (rank b))", *UNIT_LEADING_DIM)),
    on_rows("linear-of-rows-no-bias", "(call2 t k x w)", ("w",), ("(linear-key k)", "(= 2 (rank w))", *UNIT_LEADING_DIM)),
    on_rows("norm-of-rows", "(call3 t k x w b)", ("w", "b"), ("(norm-key k)", "(= 1 (rank w))")),
    # flatten(y[..., s:s+m, ...], 0, 1) along a dim e > 1 is flatten(y, 0, 1)[..., s:s+m, ...] along e - 1
    # (split_cat's flat-of-slice-after, which runs after the seed rules).
    seed("rows-of-slice", ("(row-call t c)", "(= c (Op k (Cons f l -1)))", "(= f (Flat x 0))",
                           "(= x (Sl y e s m))", "(> e 1)"),
         ("(union f (Sl (Flat y 0) (- e 1) s m))", "(merged (Flat y 0) y 0)")),
    # The call on the rows in the place of the call as written.
    seed("row-call-place", ("(row-call t c)", "(= p (pos t))", "(= h (height t))", "(= e (depth t))",
                            "(= o (output t))"),
         ("(set (pos c) p)", "(set (height c) h)", "(set (depth c) e)", "(set (output c) o)")),
    seed("row-call-before", ("(row-call t c)", "(call-before t b)"), ("(call-before c b)",)),
    seed("row-call-after", ("(row-call t c)", "(call-before a t)"), ("(call-before a c)",)),
]

# The shape facts of a merged view, as the analysis derives them for a Flat.
FLAT = "(= t (Flat x d))"
RULES += [seed(f"merged-{r.name}", tuple("(merged t x d)" if q == FLAT else q for q in r.query), r.actions)
          for r in analysis.RULES if FLAT in r.query]
