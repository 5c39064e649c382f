"""Horizontal fusion: parallel linears that read one input become one linear on concatenated
weights, each original output a slice of it (Optimus' batch_linear_lhs).

Grouping every subset of parallel ops would blow the e-graph up, so each group is formed once,
from the graph as written (``seed`` stage): the linears of one call template (key ``k``) on one
input ``x``, chained in program order (``pos``). The chain gives each member the weights and
biases from it to the group's end and its offset among the outputs; each member is then unioned
with its slice of the fused linear. The fused form costs a cat of the weights and one of the
biases every step, so the extractor keeps it only for groups where that is cheaper (four or more
linears under the eager-launch cost).
"""

from optimus_egg.rewrites import Derive, op_named

DECLARATIONS = """
(function lin-first (String T) i64 :merge (min old new))
(function lin-last (String T) i64 :merge (max old new))
(function lin-next (T) i64 :merge (min old new))
(function lin-ws (T) TList :merge old)
(function lin-bs (T) TList :merge old)
(function lin-off (T) i64 :merge (min old new))
"""


def linear(t: str, w: str, b: str) -> tuple[str, ...]:
    """``t`` is ``linear(x, w, b)`` with key ``k``; its weight and bias have dtype ``dt``."""
    return (f"(= {t} (Op k (Cons x (Cons {w} (Cons {b} (Nil) -1) -1) -1)))", op_named("k", "linear"),
            f"(= dt (dtype {w}))", f"(= dt (dtype {b}))")


A = linear("a", "w", "b")
C = linear("c", "w2", "b2")
D = Derive
RULES = [
    D("linear-group-ends", (*A, "(= i (pos a))"), ("(set (lin-first k x) i)", "(set (lin-last k x) i)"),
      stage="seed", covers="batch_linear_lhs"),
    D("linear-group-next", (*A, *C, "(= i (pos a))", "(= j (pos c))", "(< i j)"), ("(set (lin-next a) j)",),
      stage="seed", covers="batch_linear_lhs"),
    D("linear-group-last", (*A, "(= i (pos a))", "(= i (lin-last k x))"),
      ("(set (lin-ws a) (Cons w (Nil) 0))", "(set (lin-bs a) (Cons b (Nil) 0))"), stage="seed",
      covers="batch_linear_lhs"),
    D("linear-group-cons", (*A, "(= j (lin-next a))", "(= j (pos c))", "(= ws (lin-ws c))", "(= bs (lin-bs c))"),
      ("(set (lin-ws a) (Cons w ws 0))", "(set (lin-bs a) (Cons b bs 0))"), stage="seed",
      covers="batch_linear_lhs"),
    D("linear-group-first-offset", (*A, "(= i (pos a))", "(= i (lin-first k x))"), ("(set (lin-off a) 0)",),
      stage="seed", covers="batch_linear_lhs"),
    D("linear-group-offset", (*A, "(= o (lin-off a))", "(= j (lin-next a))", "(= j (pos c))", "(= r (rank a))",
                              "(= n (size a (- r 1)))"), ("(set (lin-off c) (+ o n))",),
      stage="seed", covers="batch_linear_lhs"),
    D("linear-as-slice-of-fused", (*A, "(= i (lin-first k x))", "(= i (pos h))", "(= ws (lin-ws h))",
                                   "(= bs (lin-bs h))", "(= o (lin-off a))", "(= r (rank a))", "(= n (size a (- r 1)))"),
      ("(union a (Sl (Op k (Cons x (Cons (Cat ws) (Cons (Cat bs) (Nil) -1) -1) -1)) (- r 1) o n))",),
      stage="seed", covers="batch_linear_lhs"),
]
