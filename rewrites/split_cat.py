"""Split/cat identities. Pieces of a split are ``Sl`` views, so these are facts about slices.

``cat(split(x, sizes, d), d) → x`` is two rules: adjacent slices merge, a full slice is ``x``.
"""

from optimus_egg.rewrites import Rule

RULES = [
    Rule("cat-adjacent-slices",
         "(Cons (Sl x d s a) (Cons (Sl x d s2 b) r d) d)", "(Cons (Sl x d s (+ a b)) r d)",
         ("(= s2 (+ s a))",), covers="merge_getitem_cat_pass"),
    Rule("slice-full", "(Sl x d 0 n)", "x", ("(= n (size x d))",), covers="split_cat_pass"),
    Rule("cat-single", "(Cat (Cons x (Nil) d))", "x", covers="remove_split_with_size_one_pass"),
    Rule("slice-of-slice", "(Sl (Sl x d s a) d t b)", "(Sl x d (+ s t) b)", covers="merge_splits_pass"),
    Rule("slice-of-cat-head", "(Sl (Cat (Cons a r d)) d s n)", "(Sl a d s n)",
         ("(= m (size a d))", "(<= (+ s n) m)"), covers="split_cat_pass"),
    Rule("slice-of-cat-tail", "(Sl (Cat (Cons a r d)) d s n)", "(Sl (Cat r) d (- s m) n)",
         ("(= m (size a d))", "(>= s m)", "(> n 0)"), covers="split_cat_pass"),
    Rule("squeeze-unsqueeze", "(Squeeze (Unsqueeze x d) d)", "x", covers="unbind_stack_pass"),
    Rule("unsqueeze-squeeze", "(Unsqueeze (Squeeze x d) d)", "x", ("(= 1 (size x d))",),
         covers="unbind_stack_pass"),
]
