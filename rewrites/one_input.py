"""Linears that read one input ``x`` (one call template, key ``k``): one linear on the
concatenated weights (and biases), each output a slice of it (Optimus' batch_linear_lhs).

A part of the ``horizontal`` family, which declares the keys and calls read here (``call2``,
``call3``, ``linear-key``) and the calls of a key as written (``call-before``).
"""

from functools import partial

from optimus_egg.rewrites import Derive, args

DECLARATIONS = """
; linears on one input: one-input-linear k x i a w (a, at pos i, is linear(x, w[, b]) of key k),
; one-input-bias a b its bias if it has one; the group's first (highest) and last pos, each
; member's successor, and from each member to the last: its weights, its biases, and its offset
; into the fused output
(relation one-input-linear (String T i64 T T))
(relation one-input-bias (T T))
(function one-input-first (String T) i64 :merge (max old new))
(function one-input-last (String T) i64 :merge (min old new))
(function one-input-below (T String T) i64 :merge (max old new))
(function one-input-next (T) i64 :merge (max old new))
(function one-input-weights (T) TList :merge old)
(function one-input-biases (T) TList :merge old)
(function one-input-offset (T) i64 :merge (min old new))
"""

seed = partial(Derive, stage="seed", covers="batch_linear_lhs")
#: Member a, at pos i, of the group of the linears of key k on x; c at pos j, a's successor.
LINEAR_A = "(one-input-linear k x i a w)"
LINEAR_C = "(one-input-linear k x j c w2)"
#: A member's weight: 2-d, of the dtype ``dt``; the member is no output.
LINEAR_WEIGHT = ("(linear-key k)", "(= dt (dtype w))", "(= 2 (rank w))", "(= 0 (output a))", "(= i (pos a))")
RULES = [
    # A member: with a bias of w's dtype as long as w is tall (a bias of one element, or none of
    # rank 1, broadcasts: it has no slice in a concatenated bias), or without one (a key of its
    # own: a template without the bias). The group rules read this relation, not the terms, which
    # egglog would pair again every round.
    seed("linear-member", ("(call3 a k x w b)", *LINEAR_WEIGHT, "(= dt (dtype b))", "(= 1 (rank b))",
                           "(= o (size w 0))", "(= o (size b 0))"), (LINEAR_A, "(one-input-bias a b)")),
    seed("linear-member-no-bias", ("(call2 a k x w)", *LINEAR_WEIGHT), (LINEAR_A,)),
    # The group's ends and each member's successor (found as for the batched groups: group-below).
    seed("linear-group-ends", (LINEAR_A,), ("(set (one-input-first k x) i)", "(set (one-input-last k x) i)")),
    seed("linear-group-below", (LINEAR_A,), ("(set (one-input-below a k x) i)",)),
    seed("linear-group-below-up", ("(= j (one-input-below b k x))", "(call-before c b)", "(= q (pos c))",
                                   "(< q (one-input-first k x))"), ("(set (one-input-below c k x) j)",)),
    seed("linear-group-next", (LINEAR_A, "(call-before a e)", "(= j (one-input-below e k x))", "(> i j)"),
         ("(set (one-input-next a) j)",)),
    # The weights and biases from each member to the last, built from the last one up.
    seed("linear-group-last", (LINEAR_A, "(= i (one-input-last k x))"),
         ("(set (one-input-weights a) (Cons w (Nil) 0))",)),
    seed("linear-group-cons", (LINEAR_A, "(= j (one-input-next a))", LINEAR_C, "(= ws (one-input-weights c))"),
         ("(set (one-input-weights a) (Cons w ws 0))",)),
    seed("linear-group-last-bias", (LINEAR_A, "(= i (one-input-last k x))", "(one-input-bias a b)"),
         ("(set (one-input-biases a) (Cons b (Nil) 0))",)),
    seed("linear-group-cons-bias", (LINEAR_A, "(one-input-bias a b)", "(= j (one-input-next a))", LINEAR_C,
                                    "(= bs (one-input-biases c))"),
         ("(set (one-input-biases a) (Cons b bs 0))",)),
    # Each member's offset into the fused output: the widths of the members before it.
    seed("linear-group-first-offset", (LINEAR_A, "(= i (one-input-first k x))"),
         ("(set (one-input-offset a) 0)",)),
    seed("linear-group-offset", (LINEAR_A, "(= o (one-input-offset a))", "(= j (one-input-next a))", LINEAR_C,
                                 "(= r (rank a))", "(= n (size a (- r 1)))"),
         ("(set (one-input-offset c) (+ o n))",)),
]
#: Member a of a group of two or more (a linear alone is its fused form already), at offset o,
#: n wide along its last dim r - 1; the head h, at the first pos, holds the lists.
ONE_INPUT_MEMBER = (LINEAR_A, "(= f (one-input-first k x))", "(= l (one-input-last k x))", "(< l f)",
                    "(one-input-linear k x f h w3)", "(= ws (one-input-weights h))",
                    "(= o (one-input-offset a))", "(= r (rank a))", "(= n (size a (- r 1)))")
RULES += [
    # linear(x, w_a, b_a) = linear(x, cat(ws), cat(bs))[..., o:o+n], and without biases alike.
    seed("linear-as-slice-of-fused", (*ONE_INPUT_MEMBER, "(= bs (one-input-biases h))"),
         (f"(union a (Sl (Op k {args('x', '(Cat ws)', '(Cat bs)')}) (- r 1) o n))",)),
    seed("linear-as-slice-of-fused-no-bias", (*ONE_INPUT_MEMBER, "(call2 a k x w)"),
         (f"(union a (Sl (Op k {args('x', '(Cat ws)')}) (- r 1) o n))",)),
]
