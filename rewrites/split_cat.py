"""Split/cat identities. Pieces of a split are ``Sl`` views, so these are facts about slices.

``cat(split(x, sizes, d), d) → x`` is two rules: adjacent slices merge, a full slice is ``x``.
A split of a cat is read off the list as written (relations, no new terms); unbind/stack and
reshapes are the ``Flat``/``Unflat`` views, which commute with slicing.
"""

from optimus_egg.rewrites import Derive, Rule

DECLARATIONS = """
(constructor app (TList TList) TList)
(relation run (TList TList T i64 i64 i64 i64))
(relation list-cell (TList T TList i64))
(function joined (TList) i64 :merge (max old new))
(relation run-start (TList))
(relation prefix (TList TList T i64 i64 i64))
(relation slice-in (T TList i64 i64 i64))
(relation slice-run (T TList T i64 i64 i64 i64))
(relation span (TList TList i64 i64 i64))
"""

RULES = [
    # run l m x d s n c: the c list cells from l up to m (c a power of two) are slices of x along
    # d, each next to the one before, together [s, s+n). Runs double (two runs of c cells that
    # meet make one of 2c), so every run of a list is covered by log2(n) of them, found in log2(n)
    # rounds with n log n rows (a chain of neighbouring pairs took two rounds per piece: an
    # unbind/stack of 64 pieces overran 100 rounds).
    # Empty pieces never start a run: x = cat([x, empty]) puts x inside a cat of itself, and
    # cat-of-cat then unrolls it into ever longer lists (the e-graph blows up; found by the fuzzer).
    Derive("slice-cell", ("(= l (Cons p m d))", "(= p (Sl x d s a))", "(> a 0)"), ("(run l m x d s a 1)",)),
    Derive("adjacent-slices", ("(run l m x d s a c)", "(run m k x d s2 b c)", "(= s2 (+ s a))"),
           ("(run l k x d s (+ a b) (* 2 c))",)),
    # Runs are merged where they start: at the head of a cat's list, or, in the list as the
    # program wrote it, at a slice after a cell that is not its neighbour (joined r: the piece
    # before r is the slice just before r's head; 0 when not; seed rules see every cell of the
    # graph as written before the start rule reads the flag). A cat costs one kernel whatever its
    # length, so merging at every cell would only build a list form per sub-run; and cells that
    # become slices later (relu(p[i]) once relu moves out of the slices) start no run, or every
    # cell of such a list would (that doubled the chain benchmark's e-graph).
    Derive("run-start-head", ("(= t (Cat l))",), ("(run-start l)",)),
    Derive("cell-not-joined", ("(list-cell l a r d)",), ("(set (joined r) 0)",), stage="seed"),
    Derive("cell-joined", ("(list-cell l (Sl x d s n) r d)", "(list-cell r (Sl x d u w) m d)", "(= u (+ s n))"),
           ("(set (joined r) 1)",), stage="seed"),
    Derive("run-start-after-break", ("(list-cell l a r d)", "(= 0 (joined r))", "(list-cell r (Sl x d s n) m d)"),
           ("(run-start r)",), stage="seed"),
    # prefix l m x d s n: the list l is x[s:s+n] along d followed by the list m. It grows by
    # whole runs (log2(n) rounds), and its merged forms start no prefix of their own.
    Derive("prefix", ("(run-start l)", "(run l m x d s n c)"), ("(prefix l m x d s n)",)),
    Derive("prefix-grows", ("(prefix l m x d s n)", "(run m k x d s2 b c)", "(= s2 (+ s n))"),
           ("(prefix l k x d s (+ n b))",)),
    Derive("merge-adjacent-slices", ("(prefix l m x d s n)",), ("(union l (Cons (Sl x d s n) m d))",),
           covers="merge_getitem_cat_pass"),
    # A cat inside a cat along the same dim is its pieces in place (lists along a dim are the
    # contents of a cat; argument lists use dim -1 and never match). app appends two lists.
    Rule("cat-of-cat", "(Cons (Cat (Cons h t d)) r d)", "(app (Cons h t d) r)", ("(>= d 0)",)),
    Rule("append-nil", "(app (Nil) r)", "r"),
    Rule("append-cons", "(app (Cons a t d) r)", "(Cons a (app t r) d)"),
    Rule("slice-full", "(Sl x d 0 n)", "x", ("(= n (size x d))",), covers="split_cat_pass"),
    Rule("cat-single", "(Cat (Cons x (Nil) d))", "x", covers="remove_split_with_size_one_pass"),
    Rule("slice-of-slice", "(Sl (Sl x d s a) d t b)", "(Sl x d (+ s t) b)", covers="merge_splits_pass"),
    # A slice of a cat the program wrote is a piece, or part of one. slice-in t l d s n: t is
    # [s, s+n) along d of cat(l); the walk follows the list cells as written (list-cell), not
    # every merged form of them. It skips whole spans (span l m d w c: the c cells from l up to
    # m, c a power of two, are w wide along d; spans double like runs), so the piece of a cat of
    # n is reached in O(log n) rounds (one cell per round: unbind(stack) of 64 took 80 rounds).
    # Not for an empty slice: at the border of two pieces it is an empty slice of each, so
    # relu(a)[1:1] = b[0:0] = (relu(b)[0:0] after relu moves out) makes relu(e) = e, and
    # unary-out-of-slice then builds relu(relu(...)) without end (fuzzer seed 909).
    Derive("list-cells", ("(= l (Cons a r d))",), ("(list-cell l a r d)",), stage="seed"),
    Derive("slice-of-cat", ("(= t (Sl (Cat l) d s n))", "(> n 0)"), ("(slice-in t l d s n)",), stage="seed",
           covers="split_cat_pass"),
    Derive("list-span", ("(list-cell l a r d)", "(= w (size a d))"), ("(span l r d w 1)",)),
    Derive("list-span-doubling", ("(span l m d w c)", "(span m k d v c)"), ("(span l k d (+ w v) (* 2 c))",)),
    Derive("slice-in-tail", ("(slice-in t l d s n)", "(span l r d m c)", "(>= s m)"),
           ("(slice-in t r d (- s m) n)",), covers="split_cat_pass"),
    Derive("slice-in-piece", ("(slice-in t l d 0 n)", "(list-cell l a r d)", "(= n (size a d))"),
           ("(union t a)",), covers="split_cat_pass"),
    Derive("slice-in-sliced-piece", ("(slice-in t l d s n)", "(list-cell l (Sl x d u w) r d)", "(<= (+ s n) w)"),
           ("(union t (Sl x d (+ u s) n))",), covers="split_cat_pass"),
    # A slice across adjacent pieces of x is a slice of x: slice-run t m x d s a n: t (n wide)
    # begins with x[s:s+a], and the rest of it (n - a) begins the list m. Only for a slice that
    # runs past the piece it starts in (a re-split of a cat mostly reads whole pieces).
    Derive("slice-in-run", ("(slice-in t l d u n)", "(list-cell l a r d)", "(= m (size a d))", "(< u m)",
                            "(> (+ u n) m)", "(run l k x d s w c)"),
           ("(slice-run t k x d (+ s u) (- w u) n)",), covers="split_cat_pass"),
    Derive("slice-run-grows", ("(slice-run t m x d s a n)", "(< a n)", "(run m k x d s2 b c)", "(= s2 (+ s a))"),
           ("(slice-run t k x d s (+ a b) n)",)),
    Derive("slice-run-covers", ("(slice-run t m x d s a n)", "(>= a n)"), ("(union t (Sl x d s n))",),
           covers="split_cat_pass"),
    Derive("slice-in-part-of-op", ("(slice-in t l d s n)", "(list-cell l a r d)", "(= a (Op k xs))",
                                   "(= m (size a d))", "(< (+ s n) m)"), ("(union t (Sl a d s n))",)),
    # Unbind and stack as views: a size-1 dim squeezed away is that dim merged into the next, and
    # merging commutes with slicing the outer dim, so the pieces of an unbind are slices of one
    # flattened view and a cat of them is that view (likewise stack of equal pieces → unflatten).
    Rule("squeeze-as-flat", "(Squeeze y d)", "(Flat y d)", ("(= 1 (size y d))", "(= r (rank y))", "(> r (+ d 1))"),
         covers="unbind_cat_to_view_pass"),
    Rule("flat-of-slice", "(Flat (Sl x d s a) d)", "(Sl (Flat x d) d (* s k) (* a k))", ("(= k (size x (+ d 1)))",),
         covers="unbind_cat_to_view_pass"),
    Rule("unsqueeze-as-unflat", "(Unsqueeze y d)", "(Unflat y d 1)", ("(= r (rank y))", "(< d r)"),
         covers="split_stack_to_cats_pass"),
    Rule("unflat-of-slice", "(Unflat (Sl x d s a) d c)", "(Sl (Unflat x d (/ m (/ a c))) d (/ s (/ a c)) c)",
         ("(= m (size x d))", "(= 0 (% a c))", "(= 0 (% s (/ a c)))", "(= 0 (% m (/ a c)))"),
         covers="split_stack_to_cats_pass"),
    # Reshapes commute with slices on the other dims.
    Rule("flat-of-slice-before", "(Flat (Sl x e s n) d)", "(Sl (Flat x d) e s n)", ("(< e d)",),
         covers="move_reshape_out_of_split_stack_pass"),
    Rule("flat-of-slice-after", "(Flat (Sl x e s n) d)", "(Sl (Flat x d) (- e 1) s n)", ("(> e (+ d 1))",),
         covers="move_reshape_out_of_split_stack_pass"),
    Rule("unflat-of-slice-before", "(Unflat (Sl x e s n) d c)", "(Sl (Unflat x d c) e s n)", ("(< e d)",),
         covers="move_reshape_out_of_split_stack_pass"),
    Rule("unflat-of-slice-after", "(Unflat (Sl x e s n) d c)", "(Sl (Unflat x d c) (+ e 1) s n)", ("(> e d)",),
         covers="move_reshape_out_of_split_stack_pass"),
    Rule("flat-unflat", "(Flat (Unflat x d n) d)", "x"),
    Rule("unflat-flat", "(Unflat (Flat x d) d n)", "x", ("(= n (size x d))",)),
    Rule("squeeze-unsqueeze", "(Squeeze (Unsqueeze x d) d)", "x", covers="unbind_stack_pass"),
    Rule("unsqueeze-squeeze", "(Unsqueeze (Squeeze x d) d)", "x", ("(= 1 (size x d))",),
         covers="unbind_stack_pass"),
]
