"""Elementwise ops commute with slicing and concatenation.

``cat(relu(x[a]), relu(x[b])) → relu(x)``: relu moves out of the slices (one kernel on the whole
tensor), the slices merge. Pulling an op out of a cat needs every piece to keep its dtype, so
that the cat of the operands concatenates the same values (no promotion).

``relu`` of a value that is never negative is that value (``relu(relu(x)) → relu(x)``,
``relu(x * x) → x * x``): ``nonneg`` marks such values, through views, slices and cats. An
idempotent op of a cat takes itself off the pieces: ``relu(cat([relu(x), y])) → relu(cat([x, y]))``.
"""

from optimus_egg.calls import COMMUTES, DRAWS, EXACT
from optimus_egg.optable import NONNEGATIVE, REARRANGING
from optimus_egg.rewrites import Derive, Rule, one_of, op_named

#: unary-list l f: the operands m of a list l that is f applied to each piece of m; binary-list
#: l f: the pair of operand lists. Functions, one value each (any is right: the lists are equal
#: term by term): a list class that holds a cons of itself (one with an empty piece) would
#: otherwise derive ever longer operand lists within one analysis fixpoint.
DECLARATIONS = """
(function unary-list (TList String) TList :merge old)
(datatype Operands (Pair TList TList))
(function binary-list (TList String) Operands :merge old)
(relation zip-wanted (TList TList String String))
(function zip (TList TList String) TList :merge old)
(relation nonneg (T))
(relation nonneg-list (TList))
(relation inner-wanted (TList String String))
(function inner-gone (TList String) TList :merge old)
"""

#: Moving an op out of a slice runs it on the rest of the tensor too: not for the calls that must run
#: on the elements written only (``optimus_egg.calls.computes_exactly``).
WIDENS = f'(= 0 (count-matches f "{EXACT}"))'
#: The key of a dropout that draws (``optimus_egg.calls.DRAWS``).
DRAWN = f'(= 1 (count-matches f "{DRAWS}"))'
NOT_DRAWN = f'(= 0 (count-matches f "{DRAWS}"))'
#: The key of a binary call whose operands may swap (``optimus_egg.calls.COMMUTES``).
SWAPS = f'(= 1 (count-matches f "{COMMUTES}"))'
FLOATING = ("float16", "bfloat16", "float32", "float64")
#: A product that underflows to 0 passes no gradient through relu where the product alone passes
#: 2x: in float32 and float64 only below |x| ~ 1e-23 (1e-162), not in half precision (1e-4).
WIDE_FLOATS = ("float32", "float64")
#: Ops f with f(f(x)) = f(x), in values and gradients (f'(f(x)) f'(x) = f'(x): relu's and abs's
#: is 0 where f(x) is 0, the others' 0 everywhere).
IDEMPOTENT = ("relu", "abs", "sign", "floor", "ceil", "trunc")


def _nonneg(name: str, query: tuple[str, ...], dtypes: tuple[str, ...] | None = FLOATING) -> Derive:
    """nonneg t, where ``query`` binds t (of one of ``dtypes``)."""
    typed = ("(= k (dtype t))", one_of("k", dtypes)) if dtypes else ()
    return Derive(name, (*query, *typed), ("(nonneg t)",), stage="analysis")


#: nonneg t: every element of t is >= 0 or NaN (-0.0 only where relu keeps it), so relu(t) is t; and
#: where t is 0 its op's gradient is 0 (or underflowed, WIDE_FLOATS): relu's mask changes no gradient.
NONNEG = [
    _nonneg("nonneg-relu", ("(= t (Unary f x))", op_named("f", "relu")), None),  # relu is idempotent
    _nonneg("nonneg-op", ("(= t (Unary f x))", op_named("f", *sorted(NONNEGATIVE - {"softmax"})))),
    _nonneg("nonneg-softmax", ("(= t (Op f a))", op_named("f", "softmax"))),
    _nonneg("nonneg-square", ("(= t (Unary f x))", op_named("f", "square")), WIDE_FLOATS),
    _nonneg("nonneg-self-product", ("(= t (Binary f x x))", op_named("f", "mul")), WIDE_FLOATS),
    _nonneg("nonneg-product", ("(nonneg x)", "(nonneg y)", "(= t (Binary f x y))", op_named("f", "mul")),
            WIDE_FLOATS),
    # views, slices and cats of such values hold only their elements
    *(_nonneg(f"nonneg-{view.lower()}", ("(nonneg x)", f"(= t ({view} x {args}))"), None) for view, args in (
        ("Sl", "d s n"), ("Squeeze", "d"), ("Unsqueeze", "d"), ("Flat", "d"), ("Unflat", "d n"), ("Move", "a b"))),
    _nonneg("nonneg-rearranged", ("(nonneg x)", "(= t (Op f (Cons x r -1)))", op_named("f", *sorted(REARRANGING)),
                                  "(= k (dtype x))", "(= k (dtype t))"), None),
    Derive("nonneg-list-last", ("(nonneg a)", "(= l (Cons a (Nil) d))"), ("(nonneg-list l)",), stage="analysis"),
    Derive("nonneg-list-cons", ("(nonneg-list r)", "(nonneg a)", "(= l (Cons a r d))"), ("(nonneg-list l)",),
           stage="analysis"),
    _nonneg("nonneg-cat", ("(nonneg-list l)", "(= t (Cat l))"), None),
    Rule("relu-of-nonneg", "(Unary f x)", "x", (op_named("f", "relu"), "(nonneg x)")),
]

#: An idempotent op of a cat is the op of the cat with the op gone from a piece that is that op
#: of something: f(cat(l)) is the cat of f of each piece, and f(f(a)) is f(a), so
#: relu(cat([relu(x), y])) is relu(cat([x, y])) and relu(stack([y, relu(x)])) is
#: relu(stack([y, x])). inner-gone l f: l with one such piece bare, derived in the analysis stage
#: for the lists of f's cats and their tails (inner-wanted), pieces in the cat's dtype (where a cat
#: promotes, a conversion sits between the two fs, which the argument does not cover). A function,
#: one value per list: the list it gives has a piece fewer to bare and gets its own, so k such
#: pieces take k lists (not the 2**k with and without each). A piece is never bared to its own
#: class (relu(x) = relu(relu(x))): no piece fewer, and the value kept first would hide x.
IDEMPOTENT_OF_CAT = [
    Derive("inner-wanted", ("(= t (Unary f (Cat l)))", op_named("f", *IDEMPOTENT), "(= k (dtype t))"),
           ("(inner-wanted l f k)",), stage="analysis"),
    Derive("inner-wanted-tail", ("(inner-wanted l f k)", "(= l (Cons a r d))"), ("(inner-wanted r f k)",),
           stage="analysis"),
    Derive("inner-gone-here", ("(inner-wanted l f k)", "(= l (Cons p r d))", "(= p (Unary f a))", "(!= p a)",
                               "(= k (dtype a))", "(= k (dtype p))"),
           ("(set (inner-gone l f) (Cons a r d))",), stage="analysis"),
    Derive("inner-gone-later", ("(= m (inner-gone r f))", "(inner-wanted l f k)", "(= l (Cons p r d))"),
           ("(set (inner-gone l f) (Cons p m d))",), stage="analysis"),
    Rule("idempotent-of-cat", "(Unary f (Cat l))", "(Unary f (Cat m))", ("(= m (inner-gone l f))",)),
]

RULES = [
    Rule("unary-out-of-slice", "(Unary f (Sl x d s n))", "(Sl (Unary f x) d s n)", (WIDENS,), stage="expand"),
    Rule("binary-out-of-slice", "(Binary f (Sl x d s n) (Sl y d s n))", "(Sl (Binary f x y) d s n)",
         ("(= m (size x d))", "(= m (size y d))", WIDENS), stage="expand"),
    # unary-list l f = m: the list l is f applied to each piece of m, dtypes unchanged. A fact
    # derived one cell at a time: in the analysis stage, so that a list of n pieces takes no
    # rounds (as a simplify rule it would take one round per cell). The fact found last round
    # comes first in the query: egglog's join follows the order written, and starting from the
    # list cell is slower.
    Derive("unary-list-last", ("(= l (Cons (Unary f a) (Nil) d))", "(= k (dtype a))",
                               "(= k (dtype (Unary f a)))"),
           ("(set (unary-list l f) (Cons a (Nil) d))",), stage="analysis"),
    Derive("unary-list-cons", ("(= m (unary-list r f))", "(= l (Cons (Unary f a) r d))",
                               "(= k (dtype a))", "(= k (dtype (Unary f a)))"),
           ("(set (unary-list l f) (Cons a m d))",), stage="analysis"),
    Rule("unary-out-of-cat", "(Cat l)", "(Unary f (Cat m))", ("(= m (unary-list l f))",)),
    # binary-list l f = (Pair m n): the list l is f applied to the pieces of m and n, one dtype
    # throughout.
    Derive("binary-list-last", ("(= l (Cons (Binary f a b) (Nil) d))", "(= k (dtype a))", "(= k (dtype b))",
                                "(= k (dtype (Binary f a b)))"),
           ("(set (binary-list l f) (Pair (Cons a (Nil) d) (Cons b (Nil) d)))",), stage="analysis"),
    Derive("binary-list-cons", ("(= (Pair m n) (binary-list r f))", "(= l (Cons (Binary f a b) r d))",
                                "(= k (dtype a))", "(= k (dtype b))", "(= k (dtype (Binary f a b)))"),
           ("(set (binary-list l f) (Pair (Cons a m d) (Cons b n d)))",), stage="analysis"),
    Rule("binary-out-of-cat", "(Cat l)", "(Binary f (Cat m) (Cat n))", ("(= (Pair m n) (binary-list l f))",),
         covers="batch_aten_add/sub/mul/div"),
    # The other way: f(cat(m), cat(n)) is the cat of f of their pieces, where the pieces pair up
    # (equal sizes along the dim) in one dtype. zip m n f, f of each pair of pieces, is derived
    # cell by cell in the analysis stage (as binary-list is), for the ops of cats there are.
    Derive("zip-wanted", ("(= t (Binary f (Cat m) (Cat n)))", "(= m (Cons a r d))", "(= n (Cons b s d))",
                          "(= k (dtype t))", NOT_DRAWN), ("(zip-wanted m n f k)",), stage="analysis"),
    Derive("zip-wanted-tail", ("(zip-wanted m n f k)", "(= m (Cons a r d))", "(= n (Cons b s d))",
                               "(= w (size a d))", "(= w (size b d))"), ("(zip-wanted r s f k)",), stage="analysis"),
    Derive("zip-nil", ("(zip-wanted m n f k)", "(= m (Nil))", "(= n (Nil))"), ("(set (zip m n f) (Nil))",),
           stage="analysis"),
    Derive("zip-cons", ("(= o (zip r s f))", "(zip-wanted m n f k)", "(= m (Cons a r d))", "(= n (Cons b s d))",
                        "(= w (size a d))", "(= w (size b d))", "(= k (dtype a))", "(= k (dtype b))"),
           ("(set (zip m n f) (Cons (Binary f a b) o d))",), stage="analysis"),
    Rule("binary-into-cat", "(Binary f (Cat m) (Cat n))", "(Cat o)", ("(= o (zip m n f))",)),
    # a * b is b * a: where the graph (or a rule) has both, they are one value. Not as a rewrite
    # that swaps every call: that changes which of two equally priced forms extraction keeps, and
    # the backward the forward-only model does not see can get dearer (docs/design.md).
    Derive("binary-swapped", ("(= t (Binary f x y))", "(= u (Binary f y x))", SWAPS), ("(union t u)",)),
    # Elementwise ops commute with reshapes: one op on x serves every reshaped view of it.
    Rule("unary-out-of-flat", "(Unary f (Flat x d))", "(Flat (Unary f x) d)", stage="expand"),
    Rule("unary-out-of-unflat", "(Unary f (Unflat x d n))", "(Unflat (Unary f x) d n)", stage="expand"),
    # A stack is a cat of unsqueezed pieces: moving the op inside the unsqueeze lets it out of the
    # cat. A Binary's operands have its shape, so both take the new dim in one place. The ops move
    # down a chain at once, as the program is read (seed): moved one expand round per op, a long
    # chain would spend the iteration budget before it is out of the stack. A dropout that draws
    # (option batch_random, optimus_egg.draws) is a Binary of its input and its random numbers:
    # stacked dropouts are one dropout of the stack.
    Rule("unary-into-unsqueeze", "(Unsqueeze (Unary f x) d)", "(Unary f (Unsqueeze x d))", stage="seed",
         covers="batch_relu/tanh/sigmoid/..."),
    Rule("binary-into-unsqueeze", "(Unsqueeze (Binary f x y) d)", "(Binary f (Unsqueeze x d) (Unsqueeze y d))",
         stage="seed", covers="batch_aten_*, batch_dropout"),
    # A dropout of each unbound piece is a select of one dropout of the tensor (cat and slices: the
    # rules above).
    Rule("draw-out-of-squeeze", "(Binary f (Squeeze x d) (Squeeze t d))", "(Squeeze (Binary f x t) d)",
         (DRAWN,), stage="expand", covers="batch_dropout"),
    *NONNEG,
    *IDEMPOTENT_OF_CAT,
]
