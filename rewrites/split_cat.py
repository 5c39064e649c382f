"""Split/cat identities. Pieces of a split are ``Sl`` views, so these are facts about slices.

``cat(split(x, sizes, d), d) → x`` is two rules: adjacent slices merge, a full slice is ``x``.
A split of a cat is read off the list as written (relations, no new terms); unbind/stack and
reshapes are the ``Flat``/``Unflat`` views, which commute with slicing.
"""

from typing import Iterable, Mapping, Sequence

from optimus_egg.ir import Term
from optimus_egg.rewrites import Derive, Rule, Written, WrittenRows

DECLARATIONS = """
(relation app-wanted (TList TList))
(function app (TList TList) TList :merge old)
(relation run (TList TList T i64 i64 i64 i64))
(relation prefix (TList TList T i64 i64 i64))
(relation slice-run (T TList T i64 i64 i64 i64))
(relation row-wanted (T))
(relation slice-in (T TList T i64 i64 i64))
(relation restack-wanted (TList i64 i64))
(function restacked (TList i64) TList :merge old)
"""


def _written(terms: Iterable[Term], shapes: Mapping[Term, Sequence[int | None]]) -> WrittenRows:
    """run-start r: r is a cell of a list as written whose head is a piece (a slice, squeezed or
    unsqueezed: the rules make each a slice along the list's dim), and the piece before it is
    not the one just before it. cell l a r d: l, a list along d as written, is a then r.
    slice-at t l s: t, a slice (n > 0) of a cat as written, or of
    slices of one along the same dim, begins s into the cat's list l. piece-of p x c s k: p is the slice x[s:s+k] along c the program
    takes (k > 0); row-of r x c i: r is row i of x along c as the program takes it (a squeezed
    slice of 1), x's size along c static and above 1; written-piece p: p is a slice or a
    squeezed slice the program takes."""
    joined: dict[Term, bool] = {}
    for t in terms:
        if t.op == "Cons" and t.args[1].op == "Cons" and (b := _piece(t.args[1].args[0])) is not None:
            a, r = _piece(t.args[0]), t.args[1]
            joined[r] = joined.get(r, False) or (a is not None and a[0] == b[0] and a[1][:2] == b[1][:2]
                                                 and a[1][2] + a[1][3] == b[1][2])
    cells = [(t, *t.args) for t in terms if t.op == "Cons" and t.args[2] >= 0]
    slice_at = []
    for t in terms:
        if t.op == "Sl" and t.args[3] > 0:
            x, d, s = t.args[:3]
            while x.op == "Sl" and x.args[1] == d:
                x, s = x.args[0], s + x.args[2]
            if x.op == "Cat" and x.args[0].op == "Cons" and x.args[0].args[2] == d:
                slice_at.append((t, x.args[0], s))
    written = [(t,) for t in terms if t.op == "Sl" or t.op == "Squeeze" and t.args[0].op == "Sl"]
    pieces = [(t, *t.args) for t in terms if t.op == "Sl" and t.args[3] > 0]
    rows = [(t, *t.args[0].args[:3]) for t in terms if t.op == "Squeeze" and t.args[0].op == "Sl"
            and t.args[0].args[1] == t.args[1] and t.args[0].args[3] == 1
            and (_width(t.args[0].args[0], t.args[1], shapes) or 0) > 1]
    return {"run-start": [(r,) for r, j in joined.items() if not j], "cell": cells, "slice-at": slice_at,
            "piece-of": pieces,
            "row-of": rows, "written-piece": written}


def _piece(t: Term) -> tuple[tuple[tuple[str, int], ...], tuple] | None:
    """A list head that is a slice under squeezes and unsqueezes: (those views, the slice's
    arguments); None for anything else."""
    views = []
    while t.op in ("Squeeze", "Unsqueeze"):
        views.append((t.op, t.args[1]))
        t = t.args[0]
    return (tuple(views), t.args) if t.op == "Sl" else None


def _width(a: Term, d: int, shapes: Mapping[Term, Sequence[int | None]]) -> int | None:
    """A term's static size along d: its own fact, or 1 for an unsqueeze at d."""
    shape = shapes.get(a)
    if shape is not None:
        return shape[d] if d < len(shape) else None
    return 1 if a.op == "Unsqueeze" and a.args[1] == d else None


WRITTEN = Written({"run-start": ("TList",), "cell": ("TList", "T", "TList", "i64"),
                   "slice-at": ("T", "TList", "i64"), "piece-of": ("T", "T", "i64", "i64", "i64"), "row-of": ("T", "T", "i64", "i64"),
                   "written-piece": ("T",)}, _written)


def _slice_of_view_of_cat(name: str, view: str, when: tuple[str, ...], dim: str, rebuilt: str) -> Derive:
    """``t``, a slice along ``e`` of ``u = view``, a view of the cat ``c`` that keeps ``c``'s dim
    ``dim`` as ``e``: ``rebuilt``, the view of ``v``, that slice of the cat, which the walk then
    finds in the cat's pieces (``slice-at``)."""
    bind, f = ((), "e") if dim == "e" else ((f"(= f {dim})",), "f")
    return Derive(name, ("(= t (Sl u e s n))", "(> n 0)", f"(= u {view})", *when, "(= c (Cat l))", *bind,
                         f"(cell l a r {f})"),
                  (f"(let v (Sl c {f} s n))", f"(union t {rebuilt})", "(slice-at v l s)"), stage="expand")

RULES = [
    # run l m x d s n c: the c list cells from l up to m (c a power of two) are slices of x along
    # d, each next to the one before, together [s, s+n). Runs double (two runs of c cells that
    # meet make one of 2c), so every run of a list is covered by log2(n) of them, found in log2(n)
    # rounds with n log n rows (a chain of neighbouring pairs would take two rounds per piece).
    # Empty pieces never start a run: x = cat([x, empty]) puts x inside a cat of itself, and
    # cat-of-cat would then unroll it into ever longer lists without end.
    Derive("slice-cell", ("(= l (Cons p m d))", "(= p (Sl x d s a))", "(> a 0)"), ("(run l m x d s a 1)",)),
    Derive("adjacent-slices", ("(run l m x d s a c)", "(run m k x d s2 b c)", "(= s2 (+ s a))"),
           ("(run l k x d s (+ a b) (* 2 c))",)),
    # Runs are merged where they start: at the head of a cat's list, or, in the list as the
    # program wrote it, at a slice after a cell that is not its neighbour (run-start, WRITTEN).
    # A cat costs one kernel whatever its length, so merging at every cell would only build a
    # list form per sub-run; and cells that become slices later (relu(p[i]) once relu moves out
    # of the slices) start no run, or every cell of such a list would.
    Derive("run-start-head", ("(= t (Cat l))",), ("(run-start l)",)),
    # prefix l m x d s n: the list l is x[s:s+n] along d followed by the list m. It grows by
    # whole runs (log2(n) rounds), and its merged forms start no prefix of their own.
    Derive("prefix", ("(run-start l)", "(run l m x d s n c)"), ("(prefix l m x d s n)",)),
    Derive("prefix-grows", ("(prefix l m x d s n)", "(run m k x d s2 b c)", "(= s2 (+ s n))"),
           ("(prefix l k x d s (+ n b))",)),
    Derive("merge-adjacent-slices", ("(prefix l m x d s n)",), ("(union l (Cons (Sl x d s n) m d))",),
           covers="merge_getitem_cat_pass"),
    # A cat inside a cat along the same dim is its pieces in place (lists along a dim are the
    # contents of a cat; argument lists use dim -1 and never match). app l r is the list l then
    # r, derived for the pairs a cat in a cat asks for (app-wanted) in the analysis stage: a
    # whole list at once, where appending as a rewrite would move one cell per round. A function,
    # one value per pair: a list class holding a cons of itself gets one (see pointwise's
    # unary-list).
    Derive("app-wanted", ("(= c (Cons (Cat l) r d))", "(= l (Cons h t d))", "(>= d 0)"), ("(app-wanted l r)",),
           stage="analysis"),
    Derive("app-wanted-tail", ("(app-wanted l r)", "(= l (Cons a t d))"), ("(app-wanted t r)",), stage="analysis"),
    Derive("append-nil", ("(app-wanted l r)", "(= l (Nil))"), ("(set (app l r) r)",), stage="analysis"),
    Derive("append-cons", ("(app-wanted l r)", "(= l (Cons a t d))", "(= o (app t r))"),
           ("(set (app l r) (Cons a o d))",), stage="analysis"),
    Rule("cat-of-cat", "(Cons (Cat (Cons h t d)) r d)", "o", ("(>= d 0)", "(= o (app (Cons h t d) r))")),
    # Two cats of two pieces each, glued along another dim, are four blocks, which glue the
    # other way round as well: cat([cat([a, b], e), cat([c, d], e)], f) is
    # cat([cat([a, c], f), cat([b, d], f)], e) where a and c are as wide along e (so b and d are).
    # Where the inner cats repeat a piece (cat([x, x]), cat([y, y])), the new ones are one cat.
    Rule("cat-blocks",
         "(Cat (Cons (Cat (Cons a (Cons b (Nil) e) e)) (Cons (Cat (Cons c (Cons d (Nil) e) e)) (Nil) f) f))",
         "(Cat (Cons (Cat (Cons a (Cons c (Nil) f) f)) (Cons (Cat (Cons b (Cons d (Nil) f) f)) (Nil) e) e))",
         ("(>= e 0)", "(>= f 0)", "(!= e f)", "(= w (size a e))", "(= w (size c e))"), stage="expand"),
    # The same blocks stacked: stack([cat([a, b], e), cat([c, d], e)], f) is
    # cat([stack([a, c], f), stack([b, d], f)], e'), e' the place of dim e once f is put in.
    *(Rule(f"stack-blocks-{where}",
           "(Cat (Cons (Unsqueeze (Cat (Cons a (Cons b (Nil) e) e)) f) "
           "(Cons (Unsqueeze (Cat (Cons c (Cons d (Nil) e) e)) f) (Nil) f) f))",
           "(Cat (Cons (Cat (Cons (Unsqueeze a f) (Cons (Unsqueeze c f) (Nil) f) f)) "
           f"(Cons (Cat (Cons (Unsqueeze b f) (Cons (Unsqueeze d f) (Nil) f) f)) (Nil) {moved}) {moved}))",
           ("(>= e 0)", test, "(= w (size a e))", "(= w (size c e))"), stage="expand")
      for where, test, moved in (("before", "(< e f)", "e"), ("after", "(>= e f)", "(+ e 1)"))),
    Rule("slice-full", "(Sl x d 0 n)", "x", ("(= n (size x d))",), covers="split_cat_pass"),
    Rule("cat-single", "(Cat (Cons x (Nil) d))", "x", covers="remove_split_with_size_one_pass"),
    Rule("slice-of-slice", "(Sl (Sl x d s a) d t b)", "(Sl x d (+ s t) b)", covers="merge_splits_pass"),
    # A slice of a cat is a piece, or part of one: slice-in t l a d s n says that t, n wide,
    # begins s into a, the head of the list cell l (s < a's width). slice-at t l s: t begins s
    # into the list l, for the slices of cats the program takes (WRITTEN), the slices of an
    # inner cat they fall in, and the slices of a cat that an op moved into; the walk down the
    # list is an analysis fact (no rounds, however long the list). Not every slice of every
    # class that holds a cat: cat(split(x)) = x would have every slice of x walk every list of x.
    # Empty slices have no slice-in: at the border of two pieces one is an empty slice of each,
    # so relu(a)[1:1] = b[0:0] = (relu(b)[0:0] after relu moves out) makes relu(e) = e, and
    # unary-out-of-slice would then build relu(relu(...)) without end.
    # The walk reads the lists' cells as written (cell: WRITTEN), not every list of their
    # classes: merged runs give a cell a head per run length, and every slice would find its
    # piece in each; a cat inside a cat is walked on its own (slice-in-inner-cat).
    Derive("slice-past-piece", ("(slice-at t l s)", "(cell l a r d)", "(= w (size a d))", "(>= s w)"),
           ("(slice-at t r (- s w))",), stage="analysis"),
    Derive("slice-begins-in", ("(slice-at t l s)", "(cell l a r d)", "(= w (size a d))", "(< s w)",
                               "(= t (Sl c d u n))", "(> n 0)"),
           ("(slice-in t l a d s n)",), stage="analysis"),
    Derive("slice-in-inner-cat", ("(slice-in t l a d s n)", "(= a (Cat m))", "(cell m h r d)"),
           ("(slice-at t m s)",), stage="analysis"),
    # A slice of an elementwise op of a cat is the op of that slice of the cat, whose piece the
    # walk then finds: relu(cat([x, y]))[6:8] → relu(y[2:4]) where x is 4 wide. So is a slice of
    # a view of a cat along a dim the view keeps, or of a slice or select of it along another
    # dim: cat([x, y]).view(24, 2, 2)[8:16] → y.view(8, 2, 2) where x has 8 rows. (A slice of a
    # dim the view splits or merges is unflat-of-slice's, the other way round.)
    *[_slice_of_view_of_cat(*row) for row in [
        # name, the view u of the cat c, when, the dim of c the slice cuts, u rebuilt on v
        ("slice-of-unary-of-cat", "(Unary g c)", (), "e", "(Unary g v)"),
        ("slice-of-slice-of-cat", "(Sl c d s2 n2)", ("(!= d e)",), "e", "(Sl v d s2 n2)"),
        ("slice-of-select-of-cat-before", "(Squeeze w d)", ("(= w (Sl c d i 1))", "(< e d)"), "e",
         "(Squeeze (Sl v d i 1) d)"),
        ("slice-of-select-of-cat-after", "(Squeeze w d)", ("(= w (Sl c d i 1))", "(>= e d)"), "(+ e 1)",
         "(Squeeze (Sl v d i 1) d)"),
        ("slice-of-unflat-of-cat-before", "(Unflat c d k)", ("(< e d)",), "e", "(Unflat v d k)"),
        ("slice-of-unflat-of-cat-after", "(Unflat c d k)", ("(> e (+ d 1))",), "(- e 1)", "(Unflat v d k)"),
        ("slice-of-unsqueeze-of-cat-before", "(Unsqueeze c d)", ("(< e d)",), "e", "(Unsqueeze v d)"),
        ("slice-of-unsqueeze-of-cat-after", "(Unsqueeze c d)", ("(> e d)",), "(- e 1)", "(Unsqueeze v d)"),
        ("slice-of-flat-of-cat-before", "(Flat c d)", ("(< e d)",), "e", "(Flat v d)"),
        ("slice-of-flat-of-cat-after", "(Flat c d)", ("(> e d)",), "(+ e 1)", "(Flat v d)"),
    ]],
    # ... whole rows of a flattened cat are the rows of the cat, flattened, and a part of one row
    # is a part of that row of the cat: cat([x, y]).flatten()[26:28] → y[0][2:4] (x, y: [3, 8]).
    Derive("slice-of-flat-of-cat-rows", ("(= t (Sl u d s n))", "(> n 0)", "(= u (Flat c d))",
                                         "(= k (size c (+ d 1)))", "(> k 0)", "(= 0 (% s k))", "(= 0 (% n k))",
                                         "(= c (Cat l))", "(cell l a r d)"),
           ("(let v (Sl c d (/ s k) (/ n k)))", "(union t (Flat v d))", "(slice-at v l (/ s k))"), stage="expand"),
    # ... and whole rows of a dim a view splits, of a cat along it, are rows of the cat, so split:
    # cat([x, y], 1).view(8, 2, 4)[:, 1:2] → y.view(8, 1, 4) (x, y: [8, 4]).
    Derive("slice-of-unflat-of-cat-rows", ("(= t (Sl u d s n))", "(> n 0)", "(= u (Unflat c d k))",
                                           "(= m (size u (+ d 1)))", "(= c (Cat l))", "(cell l a r d)"),
           ("(let v (Sl c d (* s m) (* n m)))", "(union t (Unflat v d n))", "(slice-at v l (* s m))"), stage="expand"),
    Derive("slice-of-flat-of-cat-in-row", ("(= t (Sl u d s n))", "(> n 0)", "(= u (Flat c d))",
                                           "(= k (size c (+ d 1)))", "(> k 0)", "(<= (+ (% s k) n) k)", "(< n k)",
                                           "(= c (Cat l))", "(cell l a r d)"),
           ("(let v (Sl c d (/ s k) 1))", "(union t (Sl (Squeeze v d) d (% s k) n))", "(slice-at v l (/ s k))"),
           stage="expand"),
    Derive("slice-in-piece", ("(slice-in t l a d 0 n)", "(= n (size a d))"), ("(union t a)",),
           covers="split_cat_pass"),
    Derive("slice-in-sliced-piece", ("(slice-in t l a d s n)", "(= a (Sl x d u w))", "(<= (+ s n) w)"),
           ("(union t (Sl x d (+ u s) n))",), covers="split_cat_pass"),
    # A slice across adjacent pieces of x is a slice of x: slice-run t m x d s a n: t (n wide)
    # begins with x[s:s+a], and the rest of it (n - a) begins the list m. Only for a slice that
    # runs past the piece it starts in (a re-split of a cat mostly reads whole pieces).
    Derive("slice-in-run", ("(slice-in t l a d u n)", "(= m (size a d))", "(< u m)", "(> (+ u n) m)",
                            "(run l k x d s w c)"),
           ("(slice-run t k x d (+ s u) (- w u) n)",), covers="split_cat_pass"),
    Derive("slice-run-grows", ("(slice-run t m x d s a n)", "(< a n)", "(run m k x d s2 b c)", "(= s2 (+ s a))"),
           ("(slice-run t k x d s (+ a b) n)",)),
    Derive("slice-run-covers", ("(slice-run t m x d s a n)", "(>= a n)"), ("(union t (Sl x d s n))",),
           covers="split_cat_pass"),
    # A slice across two pieces of anything is the cat of its two parts: the end of the piece it
    # begins in and the start v of the next, itself a part of that piece (slice-in, so an inner
    # cat is walked). The cat of two parts reads neither the rest of the cat nor of its pieces.
    Derive("slice-across-pieces", ("(slice-in t l a d u n)", "(= m (size a d))", "(> (+ u n) m)", "(cell l a r d)",
                                   "(cell r b q d)", "(= k (size b d))", "(<= (- n (- m u)) k)"),
           ("(let v (Sl b d 0 (- n (- m u))))", "(union t (Cat (Cons (Sl a d u (- m u)) (Cons v (Nil) d) d)))",
            "(slice-in v r b d 0 (- n (- m u)))"), stage="expand"),
    # Any other part of a piece (an input, a relu, an inner cat, a call) is that slice of it.
    Derive("slice-in-part", ("(slice-in t l a d s n)", "(= m (size a d))", "(<= (+ s n) m)"),
           ("(union t (Sl a d s n))",), covers="split_cat_pass"),
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
    # ... and where the slice is not aligned to rows of x (or x's dim is no whole number of
    # them): the rows of the widest window of x aligned to the slice, as piece-as-row cuts a
    # piece. Stacked pieces of a split after a piece of another width become adjacent rows.
    Rule("unflat-of-slice-in-window", "(Unflat (Sl x d s a) d c)",
         "(Sl (Unflat (Sl x d o w) d (/ w i)) d (/ (- s o) i) c)",
         ("(= m (size x d))", "(= 0 (% a c))", "(= i (/ a c))", "(= o (% s i))", "(= w (* i (/ (- m o) i)))",
          "(< w m)"), covers="split_stack_to_cats_pass"),
    # Reshapes commute with slices on the other dims.
    Rule("flat-of-slice-before", "(Flat (Sl x e s n) d)", "(Sl (Flat x d) e s n)", ("(< e d)",),
         covers="move_reshape_out_of_split_stack_pass"),
    Rule("flat-of-slice-after", "(Flat (Sl x e s n) d)", "(Sl (Flat x d) (- e 1) s n)", ("(> e (+ d 1))",),
         covers="move_reshape_out_of_split_stack_pass"),
    Rule("unflat-of-slice-before", "(Unflat (Sl x e s n) d c)", "(Sl (Unflat x d c) e s n)", ("(< e d)",),
         covers="move_reshape_out_of_split_stack_pass"),
    Rule("unflat-of-slice-after", "(Unflat (Sl x e s n) d c)", "(Sl (Unflat x d c) (+ e 1) s n)", ("(> e d)",),
         covers="move_reshape_out_of_split_stack_pass"),
    # Pieces glued along another dim than the one they were cut along (or stacked). A row i of x
    # along c glued along e is a slice of x with dim c moved to e (Move, one copy in that order):
    # a stack of rows is that copy, a cat of them the copy with the moved dim merged into the next
    # (Flat). So all N rows in order are one copy instead of a cat of N, and a run of them one
    # slice of it. A piece k wide is a row of x cut into blocks of k (Unflat), from the first
    # whole block, where a list reads it along another dim (row-wanted). row-of p x c i says
    # which rows there are, with their x, dim and place: the slices and rows the program takes
    # (piece-of, row-of: WRITTEN), and the rows of an op (a batched one) in a class the program
    # cuts (row-of-op). Never a row form matched in a row's class: that class holds the copy's
    # own slices, which became rows of rows without end. And not the rows of a batch the program
    # does not cut (a stack of parallel linears): there the copy ties with the batched forms
    # under the eager model, and the greedy extractor trades them for worse graphs.
    Derive("row-in-cat", ("(= l (Cons p r e))", "(>= e 0)", "(piece-of p x c s k)", "(!= c e)"),
           ("(row-wanted p)",), stage="analysis"),
    Derive("row-in-stack", ("(= l (Cons (Unsqueeze p e) r e))", "(piece-of p x c s k)", "(!= c e)"),
           ("(row-wanted p)",), stage="analysis"),
    Derive("piece-as-row", ("(row-wanted p)", "(piece-of p x c s k)", "(= n (size x c))", "(= a (% s k))",
                            "(= w (* k (/ (- n a) k)))", "(> w k)"),
           ("(row-of p (Unflat (Sl x c a w) c (/ w k)) c (/ (- s a) k))",), covers="split_cat_pass"),
    Derive("row-of-op", ("(= p (Squeeze (Sl x c i 1) c))", "(= x (Op k xs))", "(= n (size x c))", "(> n 1)",
                         "(written-piece p)"), ("(row-of p x c i)",)),
    Derive("stacked-row", ("(row-of p x c i)", "(= t (Unsqueeze p e))", "(!= c e)"),
           ("(union t (Sl (Move x c e) e i 1))",), covers="unbind_stack_pass"),
    Derive("cat-row", ("(= l (Cons p r e))", "(row-of p x c i)", "(!= c e)", "(>= e 0)", "(= m (size p e))",
                       "(> m 0)"), ("(union p (Sl (Flat (Move x c e) e) e (* i m) m))",), covers="split_cat_pass"),
    # Rows of one element along c (x cut into blocks of 1) glued along the next dim: the dim
    # moved past a dim of size 1 takes no element out of its place, so the copy is a view.
    # cat(split(x, 1, 0), 1) → flatten(unsqueeze(x, 0), 1, 2).
    Rule("move-past-one", "(Move (Unflat x d n) d e)", "(Unsqueeze x d)", ("(= e (+ d 1))", "(= n (size x d))"),
         covers="split_cat_pass"),
    # The copy of a stack along c with dim c moved to e, or with a neighbour of c moved to c (c
    # then goes where that dim was), is the stack of the same pieces along e: the other dims keep
    # their order. movedim(stack([x, y], 0), 1, 0) is stack([x, y], 1). restacked l e: the list
    # l of pieces unsqueezed at c, each unsqueezed at e instead, derived cell by cell in the
    # analysis stage for the stacks a Move reads (a function: one list per stack and place).
    Derive("restack-moved", ("(= t (Move (Cat l) c e))", "(= l (Cons h r c))"), ("(restack-wanted l c e)",),
           stage="analysis"),
    Derive("restack-past", ("(= t (Move (Cat l) e c))", "(= l (Cons h r c))", "(= 1 (abs (- e c)))"),
           ("(restack-wanted l c e)",), stage="analysis"),
    Derive("restack-tail", ("(restack-wanted l c e)", "(= l (Cons h r c))"), ("(restack-wanted r c e)",),
           stage="analysis"),
    Derive("restack-nil", ("(restack-wanted l c e)", "(= l (Nil))"), ("(set (restacked l e) (Nil))",),
           stage="analysis"),
    Derive("restack-cons", ("(= o (restacked r e))", "(restack-wanted l c e)", "(= l (Cons (Unsqueeze p c) r c))"),
           ("(set (restacked l e) (Cons (Unsqueeze p e) o e))",), stage="analysis"),
    Rule("move-of-stack", "(Move (Cat l) c e)", "(Cat o)", ("(= l (Cons h r c))", "(= o (restacked l e))"),
         covers="unbind_stack_pass"),
    Rule("move-past-stack", "(Move (Cat l) e c)", "(Cat o)", ("(= l (Cons h r c))", "(= 1 (abs (- e c)))",
                                                             "(= o (restacked l e))"), covers="unbind_stack_pass"),
    Rule("flat-unflat", "(Flat (Unflat x d n) d)", "x"),
    Rule("unflat-flat", "(Unflat (Flat x d) d n)", "x", ("(= n (size x d))",)),
    Rule("squeeze-unsqueeze", "(Squeeze (Unsqueeze x d) d)", "x", covers="unbind_stack_pass"),
    Rule("unsqueeze-squeeze", "(Unsqueeze (Squeeze x d) d)", "x", ("(= 1 (size x d))",),
         covers="unbind_stack_pass"),
]
