"""Split/cat identities. Pieces of a split are ``Sl`` views, so these are facts about slices.

``cat(split(x, sizes, d), d) → x`` is two rules: adjacent slices merge, a full slice is ``x``.
A split of a cat is read off the list as written (relations, no new terms); unbind/stack and
reshapes are the ``Flat``/``Unflat`` views, which commute with slicing.
"""

from optimus_egg.rewrites import Derive, Rule

DECLARATIONS = """
(constructor app (TList TList) TList)
(relation adjacent (T T T i64 i64 i64))
(relation list-cell (TList T TList i64))
(relation slice-in (T TList i64 i64 i64))
"""

RULES = [
    # adjacent p q x d s n: slices p, q of x are neighbours along d and together [s, s+n). Found
    # on its own first: joined straight into the cat pattern, the same search is 5x slower.
    # Empty pieces never merge: x = cat([x, empty]) puts x inside a cat of itself, and cat-of-cat
    # then unrolls it into ever longer lists (the e-graph blows up; found by the fuzzer).
    Derive("adjacent-slices", ("(= p (Sl x d s a))", "(= q (Sl x d s2 b))", "(= s2 (+ s a))", "(> a 0)", "(> b 0)"),
           ("(adjacent p q x d s (+ a b))",)),
    # Merged from the head of a cat only: a cat costs one kernel whatever its length, so a merged
    # run pays off only when the whole list becomes one slice, and merging at every position
    # would build a list form for every sub-run.
    Derive("cat-adjacent-slices", ("(adjacent p q x d s n)", "(= t (Cat (Cons p (Cons q r d) d)))"),
           ("(union t (Cat (Cons (Sl x d s n) r d)))",), covers="merge_getitem_cat_pass"),
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
    # every merged form of them, so it costs one step per piece.
    Derive("list-cells", ("(= l (Cons a r d))",), ("(list-cell l a r d)",), stage="seed"),
    Derive("slice-of-cat", ("(= t (Sl (Cat l) d s n))",), ("(slice-in t l d s n)",), stage="seed",
           covers="split_cat_pass"),
    Derive("slice-in-tail", ("(slice-in t l d s n)", "(list-cell l a r d)", "(= m (size a d))", "(>= s m)"),
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
