"""Shape and dtype facts for terms the rules create.

Terms that come from the FX graph get their facts from its metadata; these rules derive the
facts of new terms so that the side conditions of later rules can be checked. A size that is
symbolic has no fact, so no rule that needs it can fire.
"""

from functools import partial

from optimus_egg.rewrites import Derive

D = partial(Derive, stage="analysis")
RULES = [
    # Sl(x, d, s, n): n along d, x's size elsewhere.
    D("size-slice-dim", ("(= t (Sl x d s n))",), ("(set (size t d) n)",)),
    D("size-slice-other", ("(= t (Sl x d s n))", "(= k (size x i))", "(!= i d)"), ("(set (size t i) k)",)),
    D("rank-slice", ("(= t (Sl x d s n))", "(= r (rank x))"), ("(set (rank t) r)",)),
    D("dtype-slice", ("(= t (Sl x d s n))", "(= k (dtype x))"), ("(set (dtype t) k)",)),
    D("dtype-slice-source", ("(= t (Sl x d s n))", "(= k (dtype t))"), ("(set (dtype x) k)",)),
    # Elementwise ops keep their operand's shape.
    D("size-unary", ("(= t (Unary f x))", "(= k (size x i))"), ("(set (size t i) k)",)),
    D("size-unary-operand", ("(= t (Unary f x))", "(= k (size t i))"), ("(set (size x i) k)",)),
    D("rank-unary", ("(= t (Unary f x))", "(= r (rank x))"), ("(set (rank t) r)",)),
    D("size-binary", ("(= t (Binary f x y))", "(= k (size x i))"), ("(set (size t i) k)",)),
    D("rank-binary", ("(= t (Binary f x y))", "(= r (rank x))"), ("(set (rank t) r)",)),
    # Squeeze(x, d) drops dim d; Unsqueeze(x, d) inserts a size-1 dim at d.
    D("size-squeeze-before", ("(= t (Squeeze x d))", "(= k (size x i))", "(< i d)"), ("(set (size t i) k)",)),
    D("size-squeeze-after", ("(= t (Squeeze x d))", "(= k (size x i))", "(> i d)"), ("(set (size t (- i 1)) k)",)),
    D("rank-squeeze", ("(= t (Squeeze x d))", "(= r (rank x))"), ("(set (rank t) (- r 1))",)),
    D("dtype-squeeze", ("(= t (Squeeze x d))", "(= k (dtype x))"), ("(set (dtype t) k)",)),
    D("size-unsqueeze-dim", ("(= t (Unsqueeze x d))",), ("(set (size t d) 1)",)),
    D("size-unsqueeze-before", ("(= t (Unsqueeze x d))", "(= k (size x i))", "(< i d)"), ("(set (size t i) k)",)),
    D("size-unsqueeze-after", ("(= t (Unsqueeze x d))", "(= k (size x i))", "(>= i d)"), ("(set (size t (+ i 1)) k)",)),
    D("rank-unsqueeze", ("(= t (Unsqueeze x d))", "(= r (rank x))"), ("(set (rank t) (+ r 1))",)),
    D("dtype-unsqueeze", ("(= t (Unsqueeze x d))", "(= k (dtype x))"), ("(set (dtype t) k)",)),
    # Flat(x, d) merges dims d and d+1; Unflat(x, d, n) splits dim d into (n, size / n).
    D("size-flat-before", ("(= t (Flat x d))", "(= k (size x i))", "(< i d)"), ("(set (size t i) k)",)),
    D("size-flat-dim", ("(= t (Flat x d))", "(= a (size x d))", "(= b (size x (+ d 1)))"), ("(set (size t d) (* a b))",)),
    D("size-flat-after", ("(= t (Flat x d))", "(= k (size x i))", "(> i (+ d 1))"), ("(set (size t (- i 1)) k)",)),
    D("rank-flat", ("(= t (Flat x d))", "(= r (rank x))"), ("(set (rank t) (- r 1))",)),
    D("dtype-flat", ("(= t (Flat x d))", "(= k (dtype x))"), ("(set (dtype t) k)",)),
    D("size-unflat-before", ("(= t (Unflat x d n))", "(= k (size x i))", "(< i d)"), ("(set (size t i) k)",)),
    D("size-unflat-dims", ("(= t (Unflat x d n))", "(= m (size x d))"),
      ("(set (size t d) n)", "(set (size t (+ d 1)) (/ m n))")),
    D("size-unflat-after", ("(= t (Unflat x d n))", "(= k (size x i))", "(> i d)"), ("(set (size t (+ i 1)) k)",)),
    D("rank-unflat", ("(= t (Unflat x d n))", "(= r (rank x))"), ("(set (rank t) (+ r 1))",)),
    D("dtype-unflat", ("(= t (Unflat x d n))", "(= k (dtype x))"), ("(set (dtype t) k)",)),
    # Move(x, a, b): x's dim a at b, the others in order around it.
    D("size-move-dim", ("(= t (Move x a b))", "(= k (size x a))"), ("(set (size t b) k)",)),
    D("size-move-before", ("(= t (Move x a b))", "(= k (size x i))", "(< i a)", "(< i b)"), ("(set (size t i) k)",)),
    D("size-move-after", ("(= t (Move x a b))", "(= k (size x i))", "(> i a)", "(> i b)"), ("(set (size t i) k)",)),
    D("size-move-down", ("(= t (Move x a b))", "(= k (size x i))", "(> i a)", "(<= i b)"),
      ("(set (size t (- i 1)) k)",)),
    D("size-move-up", ("(= t (Move x a b))", "(= k (size x i))", "(< i a)", "(>= i b)"), ("(set (size t (+ i 1)) k)",)),
    D("rank-move", ("(= t (Move x a b))", "(= r (rank x))"), ("(set (rank t) r)",)),
    D("dtype-move", ("(= t (Move x a b))", "(= k (dtype x))"), ("(set (dtype t) k)",)),
    # Cat(l): the sum of the pieces along the list's dim, the head's size elsewhere.
    D("lsize-nil", ("(= l (Nil))",), ("(set (lsize l) 0)",)),
    D("lsize-cons", ("(= l (Cons a r d))", "(= m (size a d))", "(= k (lsize r))"), ("(set (lsize l) (+ m k))",)),
    D("size-cat-dim", ("(= t (Cat l))", "(= l (Cons a r d))", "(= k (lsize l))"), ("(set (size t d) k)",)),
    D("size-cat-other", ("(= t (Cat (Cons a r d)))", "(= k (size a i))", "(!= i d)"), ("(set (size t i) k)",)),
    D("rank-cat", ("(= t (Cat (Cons a r d)))", "(= k (rank a))"), ("(set (rank t) k)",)),
    D("dtype-cat", ("(= t (Cat (Cons a r d)))", "(= k (dtype a))"), ("(set (dtype t) k)",)),
]
