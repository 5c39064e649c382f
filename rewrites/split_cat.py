"""Split/cat identities. Pieces of a split are ``Sl`` views, so these are facts about slices.

``cat(split(x, sizes, d), d) → x`` is two rules: adjacent slices merge, a full slice is ``x``.
A split of a cat is read off the list as written (relations, no new terms); unbind/stack and
reshapes are the ``Flat``/``Unflat`` views, which commute with slicing.
"""

from optimus_egg.rewrites import Derive, Rule

DECLARATIONS = """
(constructor app (TList TList) TList)
(relation run (TList TList T i64 i64 i64 i64))
(relation cat-prefix (T TList T i64 i64 i64))
(relation list-cell (TList T TList i64))
(relation slice-in (T TList i64 i64 i64))
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
    # cat-prefix t m x d s n: cat t is cat([x[s:s+n] along d] + the list from m). Runs are merged
    # from the head of a cat only: a cat costs one kernel whatever its length, so a merged run
    # pays off only when the whole list becomes one slice, and merging at every position would
    # build a list form for every sub-run. A prefix grows by whole runs (log2(n) rounds), and it
    # belongs to the cat, not to a list form, so the merged forms add no prefixes of their own.
    Derive("cat-prefix", ("(= t (Cat l))", "(run l m x d s n c)"), ("(cat-prefix t m x d s n)",)),
    Derive("cat-prefix-grows", ("(cat-prefix t m x d s n)", "(run m k x d s2 b c)", "(= s2 (+ s n))"),
           ("(cat-prefix t k x d s (+ n b))",)),
    Derive("cat-adjacent-slices", ("(cat-prefix t m x d s n)",), ("(union t (Cat (Cons (Sl x d s n) m d)))",),
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
    Derive("list-cells", ("(= l (Cons a r d))",), ("(list-cell l a r d)",), stage="seed"),
    Derive("slice-of-cat", ("(= t (Sl (Cat l) d s n))",), ("(slice-in t l d s n)",), stage="seed",
           covers="split_cat_pass"),
    Derive("list-span", ("(list-cell l a r d)", "(= w (size a d))"), ("(span l r d w 1)",)),
    Derive("list-span-doubling", ("(span l m d w c)", "(span m k d v c)"), ("(span l k d (+ w v) (* 2 c))",)),
    Derive("slice-in-tail", ("(slice-in t l d s n)", "(span l r d m c)", "(>= s m)"),
           ("(slice-in t r d (- s m) n)",), covers="split_cat_pass"),
    Derive("slice-in-piece", ("(slice-in t l d 0 n)", "(list-cell l a r d)", "(= n (size a d))"),
           ("(union t a)",), covers="split_cat_pass"),
    Derive("slice-in-sliced-piece", ("(slice-in t l d s n)", "(list-cell l (Sl x d u w) r d)", "(<= (+ s n) w)"),
           ("(union t (Sl x d (+ u s) n))",), covers="split_cat_pass"),
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
