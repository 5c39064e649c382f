"""Horizontal fusion: parallel linears or layer norms become one op, each original output a
view of it.

Three forms, each grouped once from the graph as written (``seed`` stage: grouping every subset
of parallel ops would blow the e-graph up), members chained in program order (``pos``):

- linears that read one input ``x`` (one call template, key ``k``) → one linear on concatenated
  weights, each output a slice of it (Optimus' batch_linear_lhs). Groups are chained in
  descending ``pos`` (terms are numbered operands first, a list's later items before its
  earlier ones): the order a cat that glues the outputs back reads them in, so that the cat of
  the slices is the fused output itself, not a copy of each (the same for the groups below);
- linears on different inputs of one shape (``[n, i] → [n, o]``, one dtype, one template, so one
  device) → one ``baddbmm`` (``bmm`` without bias) over the stacked inputs, weights and biases,
  each output a select of it (Optimus' batch_linear). Only linears of equal ``height`` are
  grouped: a term never depends on one of its own height, so no member reads another. Where the
  inputs are the ``g`` pieces that tile one ``[n, g * i]`` tensor along dim 1, the baddbmm reads
  that tensor as a ``[g, n, i]`` view instead of a stack of its pieces, and one copy writes its
  result back as ``[n, g, o]``: a cat of the outputs in order is a view of it. Where every member
  has the same weight and bias (one Linear, a tower the features share), the baddbmm would stack
  that weight once per member: the group is one linear of the inputs stacked along dim 1 (of the
  tensor viewed as ``[n, g, i]`` where they tile it), each output a select along dim 1 of it, so
  that a cat of the outputs in order is a view of it and nothing is copied back;
- layer norms of one template (so one ``normalized_shape`` and ``eps``) on inputs of one shape
  ``[n, d]`` → one layer norm over the stacked inputs (a new leading dim is never normalized),
  each member's own weight and bias applied after it by one ``addcmul`` over the stacked weights
  and biases (Optimus' batch_layernorm). With weights, ``[d]``-shaped ones prove that only the
  last dim is normalized. Where the inputs are the ``g`` pieces that tile one ``[n, g * d]``
  tensor along dim 1 (a split of features), the norm reads that tensor viewed as ``[n, g, d]``
  instead of a stack of its pieces, and the outputs are selects along dim 1: the input costs
  no copy, and a cat of the outputs in order is a view of the result.

- matmuls ``mm(x, w)`` of one shape at one ``depth`` (the longest chain up to an output, so
  again no member reads another) → one ``bmm`` over the stacked operands, each output a select
  of it (Optimus' batch_linear_post_grad): a backward's weight gradients, which only the output
  reads, whatever height each is computed at (the backend's post-grad pass).

A fused form costs its cats (a stack of the weights every step is a kernel) and the extractor
keeps it only where that is cheaper than the members' own linears. No member is a tensor the
graph returns as its own (``output``): a select of the fused result would have to be copied out.
"""

from typing import Iterable, Mapping, Sequence

from optimus_egg.ir import Term
from optimus_egg.optable import built
from optimus_egg.rewrites import Derive, Written, WrittenRows, op_named

DECLARATIONS = """
(relation linear-key (String))
(relation mm-key (String))
(relation norm-key (String))
(relation call1 (T String T))
(relation call2 (T String T T))
(relation call3 (T String T T T))
(relation lin-member (String T i64 T T T))
(function lin-first (String T) i64 :merge (max old new))
(function lin-last (String T) i64 :merge (min old new))
(function lin-below (T String T) i64 :merge (max old new))
(function lin-next (T) i64 :merge (max old new))
(function lin-ws (T) TList :merge old)
(function lin-bs (T) TList :merge old)
(function lin-off (T) i64 :merge (min old new))
; a group: template, height, n, i, o (a layer norm: i = o = d), dtype, form (see SIG)
(datatype BatchSig (Batch String i64 i64 i64 i64 String i64))
(function bl-sig (T) BatchSig :merge old)
(function bl-x (T) T :merge old)
(function bl-w (T) T :merge old)
(function bl-b (T) T :merge old)
(function bl-first (BatchSig) i64 :merge (max old new))
(function bl-last (BatchSig) i64 :merge (min old new))
(function bl-size (BatchSig) i64 :merge (max old new))
(function bl-below (T BatchSig) i64 :merge (max old new))
(function bl-next (T) i64 :merge (max old new))
(function bl-idx (T) i64 :merge (min old new))
(function bl-xs (T) TList :merge old)
(function bl-ws (T) TList :merge old)
(function bl-bs (T) TList :merge old)
; layer norms with weights over the pieces that tile x along dim 1: group, x, start of the piece
(function tn-member (BatchSig T i64) T :merge old)
(function tn-ws (BatchSig T i64) TList :merge old)
(function tn-bs (BatchSig T i64) TList :merge old)
; linears over the pieces that tile x along dim 1 (the same, for linear groups)
(function tl-member (BatchSig T i64) T :merge old)
; the piece of x at st, in group s, ends at e (both tiled forms)
(relation tile-before (BatchSig T i64 i64))
(function tl-ws (BatchSig T i64) TList :merge old)
(function tl-bs (BatchSig T i64) TList :merge old)
; every piece of x from st on has a member with the weights and bias of the one at st
(relation tl-shared (BatchSig T i64))
; a member of a linear group, and every member after it, has the weights and bias of a; the
; inputs from a on, stacked along dim 1
(relation bl-shared (T))
(function bl-xs1 (T) TList :merge old)
"""


def args(*items: str) -> str:
    """An ``Op`` argument list."""
    out = "(Nil)"
    for item in reversed(items):
        out = f"(Cons {item} {out} -1)"
    return out


def _written(terms: Iterable[Term], shapes: Mapping[Term, Sequence[int | None]]) -> WrittenRows:
    """call-before a b: b is the call of a's key just before a in the graph as written (terms
    come in ``pos`` order)."""
    last: dict[str, Term] = {}
    before: list[tuple[Term, Term]] = []
    for t in terms:
        if t.op == "Op":
            if (b := last.get(t.args[0])) is not None:
                before.append((t, b))
            last[t.args[0]] = t
    return {"call-before": before}


WRITTEN = Written({"call-before": ("T", "T")}, _written)

#: lin-member k x i a w b: a, at pos i, is linear(x, w, b) of key k, w and b of one dtype, a not
#: an output. The group rules read this relation, not the terms: pairing two linears through
#: their terms was joined again in every seed round as the stacks grew (200 linears on the
#: pieces of one tensor: 100 s to seed, 2 s this way).
A = ("(lin-member k x i a w b)",)
C = ("(lin-member k x j c w2 b2)",)
D = Derive
RULES = [
    # The keys of each op grouped, and every call by its tensor operands (callN t k ...), read
    # once: the member rules below join these with shape facts. With the name test inline,
    # pairing two calls cost ~13 ms per seed round on a backward graph of ~600 calls and no
    # linear; matching the call's argument list inline, a layer norm's member rule was joined
    # again in every seed round (1.7 of 3.5 s on 200 norms; 0.2 s in all this way).
    *(D(rel, ("(= t (Op k l))", op_named("k", op)), (f"({rel} k)",), stage="seed", covers=covers)
      for op, rel, covers in (("linear", "linear-key", "batch_linear_lhs"), ("mm", "mm-key", "batch_linear_post_grad"),
                              ("layer_norm", "norm-key", "batch_layernorm"))),
    *(D(f"call{len(vs)}", (f"(= t (Op k {args(*vs)}))",), (f"(call{len(vs)} t k {' '.join(vs)})",), stage="seed",
        covers="batch_linear/batch_layernorm") for vs in (("x",), ("x", "w"), ("x", "w", "b"))),
    # (a bias of one element, or none of rank 1, broadcasts: no slice of a concatenated bias)
    D("linear-member", ("(call3 a k x w b)", "(linear-key k)", "(= dt (dtype w))", "(= dt (dtype b))",
                        "(= 2 (rank w))", "(= 1 (rank b))", "(= o (size w 0))", "(= o (size b 0))",
                        "(= 0 (output a))", "(= i (pos a))"),
      ("(lin-member k x i a w b)",), stage="seed", covers="batch_linear_lhs"),
    D("linear-group-ends", A, ("(set (lin-first k x) i)", "(set (lin-last k x) i)"),
      stage="seed", covers="batch_linear_lhs"),
    # (each member's successor as for the groups below: bl-below)
    D("linear-group-below", A, ("(set (lin-below a k x) i)",), stage="seed", covers="batch_linear_lhs"),
    D("linear-group-below-up",
      ("(= j (lin-below b k x))", "(call-before c b)", "(= q (pos c))", "(< q (lin-first k x))"),
      ("(set (lin-below c k x) j)",), stage="seed", covers="batch_linear_lhs"),
    D("linear-group-next", (*A, "(call-before a e)", "(= j (lin-below e k x))", "(> i j)"), ("(set (lin-next a) j)",),
      stage="seed", covers="batch_linear_lhs"),
    D("linear-group-last", (*A, "(= i (lin-last k x))"),
      ("(set (lin-ws a) (Cons w (Nil) 0))", "(set (lin-bs a) (Cons b (Nil) 0))"), stage="seed",
      covers="batch_linear_lhs"),
    D("linear-group-cons", (*A, "(= j (lin-next a))", *C, "(= ws (lin-ws c))", "(= bs (lin-bs c))"),
      ("(set (lin-ws a) (Cons w ws 0))", "(set (lin-bs a) (Cons b bs 0))"), stage="seed",
      covers="batch_linear_lhs"),
    D("linear-group-first-offset", (*A, "(= i (lin-first k x))"), ("(set (lin-off a) 0)",),
      stage="seed", covers="batch_linear_lhs"),
    D("linear-group-offset", (*A, "(= o (lin-off a))", "(= j (lin-next a))", *C, "(= r (rank a))",
                              "(= n (size a (- r 1)))"), ("(set (lin-off c) (+ o n))",),
      stage="seed", covers="batch_linear_lhs"),
    # (a group of two or more: one linear alone is already its fused form)
    D("linear-as-slice-of-fused", (*A, "(= f (lin-first k x))", "(= l (lin-last k x))", "(< l f)",
                                   "(lin-member k x f h w3 b3)", "(= ws (lin-ws h))", "(= bs (lin-bs h))",
                                   "(= o (lin-off a))", "(= r (rank a))", "(= n (size a (- r 1)))"),
      ("(union a (Sl (Op k (Cons x (Cons (Cat ws) (Cons (Cat bs) (Nil) -1) -1) -1)) (- r 1) o n))",),
      stage="seed", covers="batch_linear_lhs"),
]


def linear_member(bias: bool) -> tuple[str, ...]:
    """``t = linear(x, w[, b])``: ``x`` is ``[n, i]``, ``w`` ``[o, i]``, ``b`` ``[o]``, one dtype."""
    call = "(call3 t k x w b)" if bias else "(call2 t k x w)"
    return (call, "(linear-key k)", "(= 2 (rank x))", "(= 2 (rank w))",
            "(= n (size x 0))", "(= i (size x 1))", "(= o (size w 0))", "(= dt (dtype x))", "(= dt (dtype w))",
            "(= 0 (output t))", "(= h (height t))",
            *(("(= 1 (rank b))", "(= o (size b 0))", "(= dt (dtype b))") if bias else ()))


def mm_member() -> tuple[str, ...]:
    """``t = mm(x, w)``: ``x`` is ``[n, i]``, ``w`` ``[i, o]``, one dtype; grouped by depth, not
    height (``h``): a backward's weight gradients ``mm(grad.T, input)`` are all read by the
    output alone, whatever height each one's gradient is computed at."""
    return ("(call2 t k x w)", "(mm-key k)", "(= 2 (rank x))", "(= 2 (rank w))",
            "(= n (size x 0))", "(= i (size x 1))", "(= i (size w 0))", "(= o (size w 1))", "(= dt (dtype x))",
            "(= dt (dtype w))", "(= 0 (output t))", "(= h (depth t))")


def norm_member(affine: bool) -> tuple[str, ...]:
    """``t = layer_norm(x[, w, b])``: ``x`` is ``[n, i]``, ``w`` and ``b`` ``[i]``, one dtype."""
    call = "(call3 t k x w b)" if affine else "(call1 t k x)"
    # (the affine applied after the norm rounds once more: only where that rounding is fine)
    params = ("(= 1 (rank w))", "(= i (size w 0))", "(= dt (dtype w))", "(= 1 (rank b))", "(= i (size b 0))",
              "(= dt (dtype b))", '(!= dt "float16")', '(!= dt "bfloat16")')
    return (call, "(norm-key k)", "(= 2 (rank x))", "(= n (size x 0))",
            "(= i (size x 1))", "(= dt (dtype x))", "(= 0 (output t))", "(= h (height t))",
            *(params if affine else ()))


#: A group's signature; the form: 0 linear, 1 linear with bias, 2 layer norm with weights, 3 without,
#: 4 mm (its ``h`` a depth).
SIG = "(Batch k h n i o dt {})"
FIRST = ("(= s (bl-sig a))", "(= p (pos a))")  # member a of group s, at position p
GROUP = "batch_linear/batch_layernorm"
MEMBER = ("(set (bl-x t) x)", "(set (bl-w t) w)", "(set (bl-b t) b)")
RULES += [
    D("batch-linear-member", linear_member(True), (f"(set (bl-sig t) {SIG.format(1)})", *MEMBER),
      stage="seed", covers="batch_linear"),
    D("batch-linear-member-no-bias", linear_member(False), (f"(set (bl-sig t) {SIG.format(0)})", *MEMBER[:2]),
      stage="seed", covers="batch_linear"),
    D("batch-mm-member", mm_member(), (f"(set (bl-sig t) {SIG.format(4)})", *MEMBER[:2]), stage="seed",
      covers="batch_linear_post_grad"),
    D("batch-norm-member", norm_member(True), ("(set (bl-sig t) (Batch k h n i i dt 2))", *MEMBER),
      stage="seed", covers="batch_layernorm"),
    D("batch-norm-member-no-affine", norm_member(False), ("(set (bl-sig t) (Batch k h n i i dt 3))", MEMBER[0]),
      stage="seed", covers="batch_layernorm"),
    # Each group chained in descending pos (a cat's order, see above): its ends, each member's
    # successor and index. bl-below c s: the pos of the last member of s at or before the call c,
    # passed up the calls of c's key as written (call-before, WRITTEN) until a later member of s
    # holds a larger one, and no further than the group's first member; a member's successor is
    # what the call before it holds. Pairing every two members of a group instead cost g^2
    # matches (0.46 s of the seed for 800 towers); passed up to the last call of the key, 400
    # linears on inputs of their own (400 groups of one) made 80,000 facts.
    D("batch-group-ends", FIRST, ("(set (bl-first s) p)", "(set (bl-last s) p)"), stage="seed", covers=GROUP),
    D("batch-group-below", FIRST, ("(set (bl-below a s) p)",), stage="seed", covers=GROUP),
    D("batch-group-below-up", ("(= q (bl-below b s))", "(call-before c b)", "(= r (pos c))", "(< r (bl-first s))"),
      ("(set (bl-below c s) q)",), stage="seed", covers=GROUP),
    D("batch-group-next", (*FIRST, "(call-before a b)", "(= q (bl-below b s))", "(> p q)"), ("(set (bl-next a) q)",),
      stage="seed", covers=GROUP),
    D("batch-group-first-index", (*FIRST, "(= p (bl-first s))"), ("(set (bl-idx a) 0)",), stage="seed",
      covers=GROUP),
    D("batch-group-index", ("(= m (bl-idx a))", "(= q (bl-next a))", "(= q (pos c))"),
      ("(set (bl-idx c) (+ m 1))",), stage="seed", covers=GROUP),
    # The group's size, and the stacked inputs, weights and biases from each member to its end
    # (groups of one get none: their stacks would only be new terms for other rules to chase).
    # A stack starts where the group's last member is not its first, not at its size: the size
    # waits for the indices to reach the end, and the stacks then took as many seed rounds
    # again (806 for 400 towers, 406 this way; each round costs what the e-graph holds).
    D("batch-group-last", (*FIRST, "(= p (bl-last s))", "(= m (bl-idx a))"), ("(set (bl-size s) (+ m 1))",),
      stage="seed", covers=GROUP),
    *(rule for v in "xwb" for rule in (
        D(f"batch-group-stack-{v}-last", (*FIRST, "(= p (bl-last s))", "(> (bl-first s) p)", f"(= v (bl-{v} a))"),
          (f"(set (bl-{v}s a) (Cons (Unsqueeze v 0) (Nil) 0))",), stage="seed", covers=GROUP),
        D(f"batch-group-stack-{v}", ("(= q (bl-next a))", "(= q (pos c))", f"(= vs (bl-{v}s c))", f"(= v (bl-{v} a))"),
          (f"(set (bl-{v}s a) (Cons (Unsqueeze v 0) vs 0))",), stage="seed", covers=GROUP))),
]


def shape(t: str, dims: str) -> tuple[str, ...]:
    """``t`` is ``[dims]`` (three of n, g, o), of dtype ``dt``."""
    return (f"(set (rank {t}) 3)", f"(set (dtype {t}) dt)", *(f"(set (size {t} {d}) {v})" for d, v in enumerate(dims)))


def group_member(form: int, lists: tuple[str, ...]) -> tuple[str, ...]:
    """Member ``a``, at index ``m``, of a group of ``g > 1`` whose head ``hd`` holds ``lists``."""
    return ("(= s (bl-sig a))", f"(= s {SIG.format(form)})", "(= m (bl-idx a))", "(= g (bl-size s))",
            "(> g 1)", "(= p (bl-first s))", "(= p (pos hd))", *(f"(= {v} (bl-{v} hd))" for v in lists))


def as_select_of(fused: str, form: int, lists: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Member ``a`` of a group of ``g > 1`` (head ``hd``) is select ``m`` of ``fused`` ([g, n, o])."""
    query = group_member(form, lists)
    actions = (f"(let r {fused})", "(union a (Squeeze (Sl r 0 m 1) 0))", *shape("r", "gno"))
    return query, actions


WT = f"(Op {built('transpose', 1, 2)} {args('(Cat ws)')})"  # [g, o, i] -> [g, i, o]
NORM = '(Op (+ k "-plain") ' + args("(Cat xs)") + ")"  # the group's layer norm without weights
RULES += [
    D("batch-linear-as-select-of-baddbmm",
      *as_select_of(f"(Op {built('baddbmm')} {args('(Unsqueeze (Cat bs) 1)', '(Cat xs)', WT)})", 1,
                    ("xs", "ws", "bs")), stage="seed", covers="batch_linear"),
    D("batch-linear-as-select-of-bmm", *as_select_of(f"(Op {built('bmm')} {args('(Cat xs)', WT)})", 0, ("xs", "ws")),
      stage="seed", covers="batch_linear"),
    D("batch-mm-as-select-of-bmm", *as_select_of(f"(Op {built('bmm')} {args('(Cat xs)', '(Cat ws)')})", 4, ("xs", "ws")),
      stage="seed", covers="batch_linear_post_grad"),
    D("batch-norm-as-select-of-addcmul",
      *as_select_of(f"(Op {built('addcmul')} {args('(Unsqueeze (Cat bs) 1)', NORM, '(Unsqueeze (Cat ws) 1)')})", 2,
                    ("xs", "ws", "bs")), stage="seed", covers="batch_layernorm"),
    D("batch-norm-as-select-of-norm", *as_select_of(NORM, 3, ("xs",)), stage="seed", covers="batch_layernorm"),
]


# Layer norms with weights over the pieces that tile one tensor along dim 1, keyed by where each
# piece starts (the list order is the pieces' order, whatever the program order): a member of
# group s reads Sl(x, 1, st, d); the stacks run from the piece at st to the last one, each cell
# found from the next by tile-before (the piece at st ends at e): looked up as (+ st d), every
# new cell scanned the group's pieces (200 linears: a quarter of the seed).
TILE = ("(= s (bl-sig a))", "(= s (Batch k h n d d dt 2))", "(= xa (bl-x a))", "(= xa (Sl x 1 st d))")
PIECE = ("(= a (tn-member s x st))", "(= s (Batch k h n d d dt 2))", "(= w (bl-w a))", "(= b (bl-b a))")
TILED_NORM = '(Op (+ k "-plain") ' + args("(Unflat x 1 g)") + ")"  # the norm of x viewed as [n, g, d]
FUSED = f"(Op {built('addcmul')} {args('(Cat bs)', TILED_NORM, '(Cat ws)')})"
RULES += [
    D("tiled-norm-member", TILE, ("(set (tn-member s x st) a)", "(tile-before s x (+ st d) st)"), stage="seed",
      covers="batch_layernorm"),
    D("tiled-norm-stack-last", (*PIECE, "(= (+ st d) (size x 1))"),
      ("(set (tn-ws s x st) (Cons (Unsqueeze w 0) (Nil) 0))", "(set (tn-bs s x st) (Cons (Unsqueeze b 0) (Nil) 0))"),
      stage="seed", covers="batch_layernorm"),
    D("tiled-norm-stack", ("(= ws (tn-ws s x e))", "(= bs (tn-bs s x e))", "(tile-before s x e st)", *PIECE),
      ("(set (tn-ws s x st) (Cons (Unsqueeze w 0) ws 0))", "(set (tn-bs s x st) (Cons (Unsqueeze b 0) bs 0))"),
      stage="seed", covers="batch_layernorm"),
    # select st / d of addcmul(stack(b), norm(x as [n, g, d]), stack(w)) is member a: its own
    # piece, normalized, times its own weight plus its own bias (the stacks hold the member that
    # owns each start: tn-member keeps one per start, and only that one is rewritten)
    D("tiled-norm-as-select-of-addcmul",
      (*TILE, "(= 0 (% st d))", "(= a (tn-member s x st))", "(= ws (tn-ws s x 0))", "(= bs (tn-bs s x 0))",
       "(= W (size x 1))", "(= g (/ W d))", "(> g 1)"),
      (f"(let r {FUSED})", "(union a (Squeeze (Sl r 1 (/ st d) 1) 1))", "(set (rank r) 3)", "(set (size r 0) n)",
       "(set (size r 1) g)", "(set (size r 2) d)", "(set (dtype r) dt)"),
      stage="seed", covers="batch_layernorm"),
]


# Linears over the pieces that tile one [n, g * i] tensor along dim 1, keyed by start like the
# norms: one baddbmm (bmm without bias) reads x as [g, n, i] (x viewed as [n, g, i], its two
# leading dims swapped: no stack of the pieces) with the stacked weights and biases; its [g, n, o]
# result y is what a next batched layer stacks (each member a select along dim 0 of it). One
# contiguous copy writes y as [n, g, o], each member a select along dim 1 of that, so a cat of the
# members in order is a view of it. (A contiguous() of y's transpose always copies: g > 1, n > 1.)
T01 = built("transpose", 0, 1)
TILED_X = f"(Op {T01} {args('(Unflat x 1 g)')})"  # x as [g, n, i]
TILED_Y = (f"(Op {built('bmm')} {args(TILED_X, WT)})",
           f"(Op {built('baddbmm')} {args('(Unsqueeze (Cat bs) 1)', TILED_X, WT)})")  # [g, n, o]
TILED_BACK = f"(Op {built('contiguous')} (Cons (Op {T01} {args('y')}) (Nil) -1))"  # y written as [n, g, o]


def tiled_linear(form: int, suffix: str) -> list[Derive]:
    """The rules for linears of ``form`` (1: with bias, 0: without)."""
    sig = f"(= s (Batch k h n i o dt {form}))"
    tile = ("(= s (bl-sig a))", sig, "(= xa (bl-x a))", "(= xa (Sl x 1 st i))")
    on_tile = "(= 0 (% st i))"  # (a window that starts inside a tile is no select of the tiled result)

    def weights(member: str) -> tuple[str, ...]:
        """``member``'s weight is ``w`` (and its bias ``b``)."""
        return (f"(= w (bl-w {member}))", *((f"(= b (bl-b {member}))",) if form else ()))

    piece = ("(= a (tl-member s x st))", sig, *weights("a"))
    lists = ("ws", "bs")[:1 + form]

    def stacks(after: str) -> tuple[str, ...]:
        """The weights (and biases) of the pieces from ``st`` on, ``after`` those of the rest."""
        return tuple(f"(set (tl-{v} s x st) (Cons (Unsqueeze {v[0]} 0) {after or v} 0))" for v in lists)

    whole = f"(Op k {args('(Unflat x 1 g)', 'w', *('b',)[:form])})"  # the one linear on x as [n, g, i]
    return [
        D(f"tiled-linear-member{suffix}", tile, ("(set (tl-member s x st) a)", "(tile-before s x (+ st i) st)"),
          stage="seed", covers="batch_linear"),
        D(f"tiled-linear-stack-last{suffix}", (*piece, "(= (+ st i) (size x 1))"), stacks("(Nil)"),
          stage="seed", covers="batch_linear"),
        D(f"tiled-linear-stack{suffix}",
          (*(f"(= {v} (tl-{v} s x e))" for v in lists), "(tile-before s x e st)", *piece), stacks(""),
          stage="seed", covers="batch_linear"),
        # member a is its own piece times its own weight (plus its own bias): the stacks hold
        # the member that owns each start (tl-member keeps one per start; only that one is
        # rewritten, as for the norms). (The select of y goes in first: the extractor's fusion
        # pass then builds a relu of the members on y itself, not on a flattened y that Inductor
        # schedules worse in the backward; test_towers_of_two_layers_batch_each_layer_apart.)
        D(f"tiled-linear-as-select{suffix}",
          (*tile, on_tile, "(= a (tl-member s x st))", *(f"(= {v} (tl-{v} s x 0))" for v in lists),
           "(= W (size x 1))", "(= g (/ W i))", "(> g 1)", "(> n 1)"),
          (f"(let y {TILED_Y[form]})", f"(let r {TILED_BACK})", "(union a (Squeeze (Sl y 0 (/ st i) 1) 0))",
           "(union a (Squeeze (Sl r 1 (/ st i) 1) 1))", *shape("y", "gno"), *shape("r", "ngo")),
          stage="seed", covers="batch_linear"),
        # One linear applied to every piece (a tower shared by the features): the linear of x
        # viewed as [n, g, i], each member a select of it, no stacks. Only where every piece's
        # member has the same weights (tl-shared, walked from the last piece like the stacks): a
        # linear on the whole x for some of them would compute the others' products for nothing.
        D(f"tiled-linear-shared-last{suffix}", (*piece, "(= (+ st i) (size x 1))"), ("(tl-shared s x st)",),
          stage="seed", covers="new"),
        D(f"tiled-linear-shared{suffix}",
          ("(tl-shared s x e)", "(tile-before s x e st)", *piece, "(= c (tl-member s x e))", *weights("c")),
          ("(tl-shared s x st)",), stage="seed", covers="new"),
        D(f"tiled-linear-as-select-of-shared{suffix}",
          (*tile, on_tile, "(tl-shared s x 0)", *piece, "(= W (size x 1))", "(= g (/ W i))", "(> g 1)"),
          (f"(let y {whole})", "(union a (Squeeze (Sl y 1 (/ st i) 1) 1))", *shape("y", "ngo")),
          stage="seed", covers="new"),
    ]


RULES += [*tiled_linear(1, ""), *tiled_linear(0, "-no-bias")]


def shared_linear(form: int, suffix: str) -> list[Derive]:
    """One linear (``form`` 1: with bias, 0: without) on several inputs of one shape, a tower the
    features share: the linear of the inputs stacked along dim 1 (``[n, g, i]``), each member a
    select along dim 1 of it, so that a cat of the members in order is a view of it. The baddbmm
    stacks the one weight once per member (Optimus' batch_linear does), and a stack along dim 0
    would need a copy to be glued back. Only where every member has the same weights (bl-shared,
    walked from the group's last member like the stacks, the dim-1 stack with it)."""
    member = ("(= s (bl-sig a))", f"(= s {SIG.format(form)})", "(= x (bl-x a))")
    same = ("(= w (bl-w a))", "(= w (bl-w c))", *(("(= b (bl-b a))", "(= b (bl-b c))") if form else ()))
    y = f"(Op k {args('(Cat xs)', 'w', *('b',)[:form])})"  # [n, g, o]
    return [
        D(f"batch-linear-shared-last{suffix}", (*member, "(= p (pos a))", "(= p (bl-last s))", "(> (bl-first s) p)"),
          ("(bl-shared a)", "(set (bl-xs1 a) (Cons (Unsqueeze x 1) (Nil) 1))"), stage="seed", covers="new"),
        D(f"batch-linear-shared{suffix}",
          (*member, "(= q (bl-next a))", "(= q (pos c))", "(bl-shared c)", "(= xs (bl-xs1 c))", *same),
          ("(bl-shared a)", "(set (bl-xs1 a) (Cons (Unsqueeze x 1) xs 1))"), stage="seed", covers="new"),
        D(f"batch-linear-as-select-of-shared{suffix}",
          (*group_member(form, ("w", "b")[:1 + form]), "(bl-shared hd)", "(= xs (bl-xs1 hd))"),
          (f"(let y {y})", "(union a (Squeeze (Sl y 1 m 1) 1))", *shape("y", "ngo")), stage="seed", covers="new"),
    ]


RULES += [*shared_linear(1, ""), *shared_linear(0, "-no-bias")]
