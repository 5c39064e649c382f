"""Horizontal fusion: parallel linears, matmuls or layer norms become one op, each original
output a view of it.

Each kind of group is formed once, from the graph as written (``seed`` stage: grouping every
subset of parallel ops would blow the e-graph up), its members chained in descending ``pos``
(terms are numbered operands first, a list's later items before its earlier ones). That is the
order a cat that glues the outputs back reads them in, so the cat of the members is the fused
output itself, not a copy of each.

- linears that read one input ``x`` (one call template, key ``k``) → one linear on the
  concatenated weights, each output a slice of it (Optimus' batch_linear_lhs; ``one_input``);
- linears on different inputs of one shape (``[n, i] → [n, o]``, one dtype, one template, so one
  device) → one ``baddbmm`` (``bmm`` without bias) over the stacked inputs, weights and biases,
  each output a select of it (Optimus' batch_linear). Only linears of equal ``height`` are
  grouped: a term never depends on one of its own height, so no member reads another. Where the
  inputs are the ``g`` pieces that tile one ``[n, g * i]`` tensor along dim 1, the baddbmm reads
  that tensor as a ``[g, n, i]`` view instead of a stack of its pieces, and one copy writes its
  result back as ``[n, g, o]``: a cat of the outputs in order is a view of it. Where every member
  has the same weight and bias (one Linear, a tower the features share), the group is one linear
  of the inputs stacked along dim 1 (of the tensor viewed as ``[n, g, i]`` where they tile it),
  each output a select along dim 1 of it: nothing is stacked per member or copied back;
- layer norms of one template (so one ``normalized_shape`` and ``eps``) on inputs of one shape
  ``[n, d]`` (or ``[n, i, d]``) → one layer norm over the stacked inputs (a new leading dim is never normalized),
  each member's own weight and bias applied after it by one ``addcmul`` over the stacked weights
  and biases (Optimus' batch_layernorm). With weights, ``[d]``-shaped ones prove that only the
  last dim is normalized, ``[i, d]``-shaped ones the last two (of ``[n, i, d]`` inputs). Where
  the inputs tile one ``[n, g * d]`` tensor along dim 1 (a split of features), the norm reads that
  tensor viewed as ``[n, g, d]`` (over two dims, ``[n, i, g * d]`` along dim 2, viewed as
  ``[n, g, i, d]``) and the outputs are selects along dim 1: the input costs no copy, and a cat
  of the outputs in order is a view of the result;
- matmuls ``mm(x, w)`` of one shape at one ``depth`` (the longest chain up to an output, so again
  no member reads another) → one ``bmm`` over the stacked operands, each output a select of it
  (Optimus' batch_linear_post_grad): a backward's weight gradients, which only the output reads,
  whatever height each is computed at.

Members are 2-D; a linear or layer norm of higher rank joins as the same call on its rows
(``rows``).

A fused form costs its cats (a stack of the weights every step is a kernel), and the extractor
keeps it only where that is cheaper than the members' own ops. No member is a tensor the graph
returns as its own (``output``): a select of the fused result would have to be copied out.
"""

from dataclasses import dataclass
from enum import IntEnum
from functools import partial
from typing import Iterable, Mapping, Sequence

from optimus_egg.calls import built
from optimus_egg.ir import Term
from optimus_egg.rewrites import Derive, Written, WrittenRows, args, one_input, op_named, rows


class Form(IntEnum):
    """What a batched group computes: the last field of its ``Batch`` key."""

    LINEAR = 0  # linear without bias
    LINEAR_BIAS = 1
    NORM_AFFINE = 2  # layer norm with weight and bias
    NORM = 3  # layer norm without
    MM = 4  # grouped by depth, not height
    NORM2_AFFINE = 5  # layer norm over the last two dims, with weight and bias
    NORM3 = 6  # layer norm without, of an [n, i, o] input


DECLARATIONS = """
; the keys of the grouped ops; callN t k x [w [b]]: call t of key k on tensor operands x, w, b
(relation linear-key (String))
(relation mm-key (String))
(relation norm-key (String))
(relation call1 (T String T))
(relation call2 (T String T T))
(relation call3 (T String T T T))
""" + one_input.DECLARATIONS + """
; a batched group: template, height, n, i, o (a layer norm: i = o = d; over two dims, i and o are
; those two), dtype, Form
(datatype Group (Batch String i64 i64 i64 i64 String i64))
; a member's group and operands; the group's first and last pos and size; each member's
; successor and index; and from each member to the last, its operands stacked along a new dim 0
(function group-of (T) Group :merge old)
(function group-input (T) T :merge old)
(function group-weight (T) T :merge old)
(function group-bias (T) T :merge old)
(function group-first (Group) i64 :merge (max old new))
(function group-last (Group) i64 :merge (min old new))
(function group-size (Group) i64 :merge (max old new))
(function group-below (T Group) i64 :merge (max old new))
(function group-next (T) i64 :merge (max old new))
(function group-index (T) i64 :merge (min old new))
(function group-inputs (T) TList :merge old)
(function group-weights (T) TList :merge old)
(function group-biases (T) TList :merge old)
; layer norms with weights over the pieces that tile x along a dim: the member whose input is the
; piece at st, and the weights and biases of the pieces from st on
(function tiled-norm-at (Group T i64) T :merge old)
(function tiled-norm-weights (Group T i64) TList :merge old)
(function tiled-norm-biases (Group T i64) TList :merge old)
; the same for linears
(function tiled-linear-at (Group T i64) T :merge old)
; tile-before s x e st: the piece of x at st, in group s, ends at e (both tiled kinds)
(relation tile-before (Group T i64 i64))
(function tiled-linear-weights (Group T i64) TList :merge old)
(function tiled-linear-biases (Group T i64) TList :merge old)
; every piece of x from st on has a member with the weights and bias of the one at st
(relation tiled-shared-weights (Group T i64))
; a member, and every member after it, has the weights and bias of this one; the inputs from this
; member on, stacked along dim 1
(relation group-shares-weights (T))
(function group-inputs-dim1 (T) TList :merge old)
""" + rows.DECLARATIONS


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

seed = partial(Derive, stage="seed")

#: The op table's name of each grouped op, the relation of its keys, the Optimus pass.
GROUPED_OPS = (("linear", "linear-key", "batch_linear_lhs"), ("mm", "mm-key", "batch_linear_post_grad"),
               ("layer_norm", "norm-key", "batch_layernorm"))
RULES = [
    # The keys of each grouped op, and every call by its tensor operands, read once: the member
    # rules join these with shape facts. A name test or an argument list matched inline in a
    # member rule would be joined again in every seed round.
    *(seed(rel, ("(= t (Op k l))", op_named("k", op)), (f"({rel} k)",), covers=covers)
      for op, rel, covers in GROUPED_OPS),
    *(seed(f"call{len(vs)}", (f"(= t (Op k {args(*vs)}))",), (f"(call{len(vs)} t k {' '.join(vs)})",),
           covers="batch_linear/batch_layernorm")
      for vs in (("x",), ("x", "w"), ("x", "w", "b"))),
    # Calls on inputs of rank 3 or more as calls on 2-D views, which the rules below group.
    *rows.RULES,
]

RULES += one_input.RULES

# Batched groups: linears, layer norms or matmuls on inputs of one shape, one op over the stacks.


def group_key(form: Form, i: str = "i", o: str = "o") -> str:
    """The ``Batch`` key of a group of ``form``: template k, height (depth) h, n, i, o, dtype dt."""
    return f"(Batch k h n {i} {o} dt {form.value})"


#: The relation of each member's operand (or of the stack of them, from each member on).
OPERAND = {"x": "group-input", "w": "group-weight", "b": "group-bias",
           "xs": "group-inputs", "ws": "group-weights", "bs": "group-biases"}


def operands(*names: str) -> tuple[str, ...]:
    """Actions: member ``t``'s operands ``names`` (of x, w, b), for the stacks."""
    return tuple(f"(set ({OPERAND[v]} t) {v})" for v in names)


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


def norm3_member(affine: bool) -> tuple[str, ...]:
    """``t = layer_norm(x[, w, b])``: ``x`` is ``[n, i, o]``, one dtype; with weights, ``w`` and
    ``b`` are ``[i, o]`` (which proves that the last two dims are normalized)."""
    call = "(call3 t k x w b)" if affine else "(call1 t k x)"
    params = (*(f"(= {fact} ({what} {v}))" for v in "wb" for fact, what in (("2", "rank"), ("dt", "dtype"))),
              *(f"(= {d} (size {v} {j}))" for v in "wb" for j, d in enumerate("io")),
              '(!= dt "float16")', '(!= dt "bfloat16")')
    return (call, "(norm-key k)", "(= 3 (rank x))", "(= n (size x 0))", "(= i (size x 1))", "(= o (size x 2))",
            "(= dt (dtype x))", "(= 0 (output t))", "(= h (height t))", *(params if affine else ()))


batched = partial(seed, covers="batch_linear/batch_layernorm")
MEMBER_AT = ("(= s (group-of a))", "(= p (pos a))")  # member a of group s, at pos p


def stack_rules(v: str) -> list[Derive]:
    """Operand ``v`` (x, w or b) of each member from it to the group's last, stacked along a new
    dim 0, built from the last member up; only in groups of two or more."""
    one, stack = OPERAND[v], OPERAND[v + "s"]
    return [
        batched(f"batch-group-stack-{v}-last", (*MEMBER_AT, "(= p (group-last s))", "(> (group-first s) p)",
                                                f"(= v ({one} a))"),
                (f"(set ({stack} a) (Cons (Unsqueeze v 0) (Nil) 0))",)),
        batched(f"batch-group-stack-{v}", ("(= q (group-next a))", "(= q (pos c))", f"(= vs ({stack} c))",
                                           f"(= v ({one} a))"),
                (f"(set ({stack} a) (Cons (Unsqueeze v 0) vs 0))",)),
    ]


RULES += [
    # The members, each with its group and the operands its stacks need.
    seed("batch-linear-member", linear_member(True),
         (f"(set (group-of t) {group_key(Form.LINEAR_BIAS)})", *operands("x", "w", "b")), covers="batch_linear"),
    seed("batch-linear-member-no-bias", linear_member(False),
         (f"(set (group-of t) {group_key(Form.LINEAR)})", *operands("x", "w")), covers="batch_linear"),
    seed("batch-mm-member", mm_member(), (f"(set (group-of t) {group_key(Form.MM)})", *operands("x", "w")),
         covers="batch_linear_post_grad"),
    seed("batch-norm-member", norm_member(True),
         (f"(set (group-of t) {group_key(Form.NORM_AFFINE, 'i', 'i')})", *operands("x", "w", "b")),
         covers="batch_layernorm"),
    seed("batch-norm2-member", norm3_member(True),
         (f"(set (group-of t) {group_key(Form.NORM2_AFFINE)})", *operands("x", "w", "b")), covers="batch_layernorm"),
    seed("batch-norm3-member-no-affine", norm3_member(False),
         (f"(set (group-of t) {group_key(Form.NORM3)})", *operands("x")), covers="batch_layernorm"),
    seed("batch-norm-member-no-affine", norm_member(False),
         (f"(set (group-of t) {group_key(Form.NORM, 'i', 'i')})", *operands("x")), covers="batch_layernorm"),
    # Each group chained in descending pos: its ends, each member's successor and index.
    # group-below c s: the pos of the last member of s at or before the call c, passed up the
    # calls of c's key as written (call-before, WRITTEN) until a later member of s holds a larger
    # one, and no further than the group's first member; a member's successor is what the call
    # before it holds. This is linear in the calls between members, where pairing every two
    # members would be quadratic in the group's size.
    batched("batch-group-ends", MEMBER_AT, ("(set (group-first s) p)", "(set (group-last s) p)")),
    batched("batch-group-below", MEMBER_AT, ("(set (group-below a s) p)",)),
    batched("batch-group-below-up", ("(= q (group-below b s))", "(call-before c b)", "(= r (pos c))",
                                     "(< r (group-first s))"), ("(set (group-below c s) q)",)),
    batched("batch-group-next", (*MEMBER_AT, "(call-before a b)", "(= q (group-below b s))", "(> p q)"),
            ("(set (group-next a) q)",)),
    batched("batch-group-first-index", (*MEMBER_AT, "(= p (group-first s))"), ("(set (group-index a) 0)",)),
    batched("batch-group-index", ("(= m (group-index a))", "(= q (group-next a))", "(= q (pos c))"),
            ("(set (group-index c) (+ m 1))",)),
    # The group's size, and the stacks. A stack starts where the group's last member is not its
    # first, without waiting for the size, which is known only once the indices reach the end.
    # Groups of one get no stacks: those would only be new terms for other rules to chase.
    batched("batch-group-last", (*MEMBER_AT, "(= p (group-last s))", "(= m (group-index a))"),
            ("(set (group-size s) (+ m 1))",)),
    *stack_rules("x"), *stack_rules("w"), *stack_rules("b"),
]


def shape(t: str, dims: str) -> tuple[str, ...]:
    """Actions: ``t`` is ``[dims]`` (the sizes bound to those names), of dtype ``dt``."""
    return (f"(set (rank {t}) {len(dims)})", f"(set (dtype {t}) dt)", *(f"(set (size {t} {d}) {v})" for d, v in enumerate(dims)))


def group_member(form: Form, lists: tuple[str, ...]) -> tuple[str, ...]:
    """Member ``a``, at index ``m``, of a group of ``g > 1`` whose head ``hd`` holds ``lists``."""
    return ("(= s (group-of a))", f"(= s {group_key(form)})", "(= m (group-index a))", "(= g (group-size s))",
            "(> g 1)", "(= p (group-first s))", "(= p (pos hd))", *(f"(= {v} ({OPERAND[v]} hd))" for v in lists))


def as_select_of(fused: str, form: Form, lists: tuple[str, ...], dims: str = "gno"
                 ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Member ``a`` of a group of ``g > 1`` (head ``hd``) is select ``m`` of ``fused`` (``[dims]``)."""
    query = group_member(form, lists)
    actions = (f"(let r {fused})", "(union a (Squeeze (Sl r 0 m 1) 0))", *shape("r", dims))
    return query, actions


STACKED_WEIGHTS_T = f"(Op {built('transpose', 1, 2)} {args('(Cat ws)')})"  # [g, o, i] -> [g, i, o]
PLAIN_NORM = f'(Op (+ k "-plain") {args("(Cat xs)")})'  # the group's layer norm without weights
#: Each batched group's fused op over its stacks, [g, n, o].
BADDBMM = f"(Op {built('baddbmm')} {args('(Unsqueeze (Cat bs) 1)', '(Cat xs)', STACKED_WEIGHTS_T)})"
BMM = f"(Op {built('bmm')} {args('(Cat xs)', STACKED_WEIGHTS_T)})"
MM_BMM = f"(Op {built('bmm')} {args('(Cat xs)', '(Cat ws)')})"
NORM_ADDCMUL = f"(Op {built('addcmul')} {args('(Unsqueeze (Cat bs) 1)', PLAIN_NORM, '(Unsqueeze (Cat ws) 1)')})"
RULES += [
    # Member m of a group is select m of the fused op over the stacks (the head's stacks hold all).
    seed("batch-linear-as-select-of-baddbmm", *as_select_of(BADDBMM, Form.LINEAR_BIAS, ("xs", "ws", "bs")),
         covers="batch_linear"),
    seed("batch-linear-as-select-of-bmm", *as_select_of(BMM, Form.LINEAR, ("xs", "ws")), covers="batch_linear"),
    seed("batch-mm-as-select-of-bmm", *as_select_of(MM_BMM, Form.MM, ("xs", "ws")), covers="batch_linear_post_grad"),
    seed("batch-norm-as-select-of-addcmul", *as_select_of(NORM_ADDCMUL, Form.NORM_AFFINE, ("xs", "ws", "bs")),
         covers="batch_layernorm"),
    seed("batch-norm-as-select-of-norm", *as_select_of(PLAIN_NORM, Form.NORM, ("xs",)), covers="batch_layernorm"),
    seed("batch-norm2-as-select-of-addcmul",
         *as_select_of(NORM_ADDCMUL, Form.NORM2_AFFINE, ("xs", "ws", "bs"), dims="gnio"), covers="batch_layernorm"),
    seed("batch-norm3-as-select-of-norm", *as_select_of(PLAIN_NORM, Form.NORM3, ("xs",), dims="gnio"),
         covers="batch_layernorm"),
]


# Batched groups whose inputs tile one tensor (along dim 1, or 2 for norms over two dims): the op
# reads that tensor as a view.


@dataclass(frozen=True)
class Tiling:
    """Groups of ``kind`` (``norm`` or ``linear``) with key ``key`` whose members read the pieces
    that tile one tensor ``x`` along ``dim``, ``width`` wide, each with a weight (and a bias).

    Members are keyed by where their piece starts (``tiled-KIND-at s x st``), so that the stacks
    follow the pieces' order whatever the program order. Each start has one owner (the function
    holds one member), and only that member is rewritten. The stacks run from the piece at ``st``
    to the last one, each cell found from the next through ``tile-before``: a lookup, where
    ``(+ st width)`` would scan the group's pieces for every new cell.
    """

    kind: str
    key: str
    width: str
    bias: bool
    dim: int = 1  # the dim of x the pieces tile

    @property
    def at(self) -> str:
        return f"tiled-{self.kind}-at"

    @property
    def lists(self) -> tuple[str, ...]:
        return ("ws", "bs") if self.bias else ("ws",)

    def stack(self, v: str) -> str:
        """The relation of the stacked weights (``ws``) or biases (``bs``) from a piece on."""
        return f"tiled-{self.kind}-{'weights' if v == 'ws' else 'biases'}"

    @property
    def tile(self) -> tuple[str, ...]:
        """Member ``a`` of group ``s`` reads the piece of ``x`` at ``st``."""
        return ("(= s (group-of a))", f"(= s {self.key})", "(= xa (group-input a))",
                f"(= xa (Sl x {self.dim} st {self.width}))")

    @property
    def on_tile(self) -> str:
        """``st`` starts a tile (a window that starts inside one is no select of the tiled result)."""
        return f"(= 0 (% st {self.width}))"

    def weights(self, member: str) -> tuple[str, ...]:
        """``member``'s weight is ``w`` (and its bias ``b``)."""
        return (f"(= w (group-weight {member}))", *((f"(= b (group-bias {member}))",) if self.bias else ()))

    @property
    def piece(self) -> tuple[str, ...]:
        """Member ``a`` owns the piece at ``st``; its weight ``w`` (and bias ``b``)."""
        return (f"(= a ({self.at} s x st))", f"(= s {self.key})", *self.weights("a"))

    @property
    def last_piece(self) -> str:
        return f"(= (+ st {self.width}) (size x {self.dim}))"

    def cons(self, rest: str) -> tuple[str, ...]:
        """Actions: the stacks from ``st`` on are the piece's operands, then ``rest`` (default:
        the stacks bound to ``ws``, ``bs``)."""
        return tuple(f"(set ({self.stack(v)} s x st) (Cons (Unsqueeze {v[0]} 0) {rest or v} 0))"
                     for v in self.lists)

    def stack_rules(self, suffix: str, covers: str) -> list[Derive]:
        """Each piece's owner, then its stacks, built from the last piece up."""
        return [
            seed(f"tiled-{self.kind}-member{suffix}", self.tile,
                 (f"(set ({self.at} s x st) a)", f"(tile-before s x (+ st {self.width}) st)"), covers=covers),
            seed(f"tiled-{self.kind}-stack-last{suffix}", (*self.piece, self.last_piece), self.cons("(Nil)"),
                 covers=covers),
            seed(f"tiled-{self.kind}-stack{suffix}",
                 (*(f"(= {v} ({self.stack(v)} s x e))" for v in self.lists), "(tile-before s x e st)", *self.piece),
                 self.cons(""), covers=covers),
        ]

    @property
    def whole(self) -> tuple[str, ...]:
        """Member ``a`` owns a piece on a tile of ``x``, ``g > 1`` pieces wide; ``ws`` (``bs``):
        the stacks of all the pieces."""
        return (*self.tile, self.on_tile, f"(= a ({self.at} s x st))",
                *(f"(= {v} ({self.stack(v)} s x 0))" for v in self.lists),
                f"(= W (size x {self.dim}))", f"(= g (/ W {self.width}))", "(> g 1)")


# Layer norms with weights: select st / d of addcmul(stack(b), norm(x as [n, g, d]), stack(w)) is
# member a, its own piece normalized, times its own weight plus its own bias. Over two dims, the
# pieces tile x [n, i, g * d] along dim 2: x viewed as [n, i, g, d], dims 1 and 2 swapped (a view),
# is [n, g, i, d], whose last two dims each norm normalizes.
TILED_NORMS = Tiling("norm", group_key(Form.NORM_AFFINE, "d", "d"), "d", bias=True)
TILED_NORMS2 = Tiling("norm", group_key(Form.NORM2_AFFINE, "i", "d"), "d", bias=True, dim=2)
TILED_PLAIN_NORM = f'(Op (+ k "-plain") {args("(Unflat x 1 g)")})'  # the norm of x viewed as [n, g, d]
TILED_X2 = f"(Op {built('transpose', 1, 2)} {args('(Unflat x 2 g)')})"  # x as [n, g, i, d]
TILED_PLAIN_NORM2 = f'(Op (+ k "-plain") {args(TILED_X2)})'


def tiled_norm_addcmul(plain: str) -> str:
    return f"(Op {built('addcmul')} {args('(Cat bs)', plain, '(Cat ws)')})"


RULES += [
    *TILED_NORMS.stack_rules("", covers="batch_layernorm"),
    seed("tiled-norm-as-select-of-addcmul", TILED_NORMS.whole,
         (f"(let r {tiled_norm_addcmul(TILED_PLAIN_NORM)})", "(union a (Squeeze (Sl r 1 (/ st d) 1) 1))",
          *shape("r", "ngd")), covers="batch_layernorm"),
    *TILED_NORMS2.stack_rules("-two-dims", covers="batch_layernorm"),
    seed("tiled-norm-as-select-of-addcmul-two-dims", TILED_NORMS2.whole,
         (f"(let r {tiled_norm_addcmul(TILED_PLAIN_NORM2)})", "(union a (Squeeze (Sl r 1 (/ st d) 1) 1))",
          *shape("r", "ngid")), covers="batch_layernorm"),
]

# Linears: one baddbmm (bmm without bias) reads x as [g, n, i] (x viewed as [n, g, i], its two
# leading dims swapped: no stack of the pieces) with the stacked weights and biases; its [g, n, o]
# result y is what a next batched layer stacks (each member a select along dim 0 of it). One
# contiguous copy writes y as [n, g, o], each member a select along dim 1 of that, so a cat of the
# members in order is a view of it. (A contiguous() of y's transpose always copies: g > 1, n > 1.)
TRANSPOSE_01 = built("transpose", 0, 1)
TILED_X = f"(Op {TRANSPOSE_01} {args('(Unflat x 1 g)')})"  # x as [g, n, i]
TILED_BMM = f"(Op {built('bmm')} {args(TILED_X, STACKED_WEIGHTS_T)})"  # [g, n, o]
TILED_BADDBMM = f"(Op {built('baddbmm')} {args('(Unsqueeze (Cat bs) 1)', TILED_X, STACKED_WEIGHTS_T)})"
TILED_Y_T = f"(Op {TRANSPOSE_01} {args('y')})"  # y as [n, g, o], strided
TILED_BACK = f"(Op {built('contiguous')} {args(TILED_Y_T)})"  # y written as [n, g, o]


def tiled_linear(bias: bool) -> list[Derive]:
    """The rules for tiled linears with a bias, or without."""
    form, suffix = (Form.LINEAR_BIAS, "") if bias else (Form.LINEAR, "-no-bias")
    tiling = Tiling("linear", group_key(form), "i", bias)
    shared_y = f"(Op k {args('(Unflat x 1 g)', 'w', *(('b',) if bias else ()))})"  # one linear on x as [n, g, i]
    return [
        *tiling.stack_rules(suffix, covers="batch_linear"),
        # Member a is its own piece times its own weight (plus its own bias). The select of y goes
        # in first: the extractor's fusion pass then builds a relu of the members on y itself, not
        # on a flattened y that Inductor schedules worse in the backward
        # (test_towers_of_two_layers_batch_each_layer_apart).
        seed(f"tiled-linear-as-select{suffix}", (*tiling.whole, "(> n 1)"),
             (f"(let y {TILED_BADDBMM if bias else TILED_BMM})", f"(let r {TILED_BACK})",
              "(union a (Squeeze (Sl y 0 (/ st i) 1) 0))", "(union a (Squeeze (Sl r 1 (/ st i) 1) 1))",
              *shape("y", "gno"), *shape("r", "ngo")), covers="batch_linear"),
        # One linear applied to every piece (a tower shared by the features): the linear of x
        # viewed as [n, g, i], each member a select of it, no stacks. Only where every piece's
        # member has the same weights (tiled-shared-weights, walked from the last piece like the
        # stacks): a linear on the whole x for some of them would compute the others' products
        # for nothing.
        seed(f"tiled-linear-shared-last{suffix}", (*tiling.piece, tiling.last_piece),
             ("(tiled-shared-weights s x st)",), covers="new"),
        seed(f"tiled-linear-shared{suffix}",
             ("(tiled-shared-weights s x e)", "(tile-before s x e st)", *tiling.piece, "(= c (tiled-linear-at s x e))",
              *tiling.weights("c")), ("(tiled-shared-weights s x st)",), covers="new"),
        seed(f"tiled-linear-as-select-of-shared{suffix}",
             (*tiling.tile, tiling.on_tile, "(tiled-shared-weights s x 0)", *tiling.piece, "(= W (size x 1))",
              "(= g (/ W i))", "(> g 1)"),
             (f"(let y {shared_y})", "(union a (Squeeze (Sl y 1 (/ st i) 1) 1))", *shape("y", "ngo")), covers="new"),
    ]


RULES += [*tiled_linear(bias=True), *tiled_linear(bias=False)]


def shared_linear(bias: bool) -> list[Derive]:
    """One linear on several inputs of one shape, a tower the features share: the linear of the
    inputs stacked along dim 1 (``[n, g, i]``), each member a select along dim 1 of it, so that a
    cat of the members in order is a view of it. The baddbmm would stack the one weight once per
    member, and its stack along dim 0 would need a copy to be glued back. Only where every member
    has the same weights (group-shares-weights, walked from the group's last member like the
    stacks, the dim-1 stack with it)."""
    form, suffix = (Form.LINEAR_BIAS, "") if bias else (Form.LINEAR, "-no-bias")
    member = ("(= s (group-of a))", f"(= s {group_key(form)})", "(= x (group-input a))")
    same = ("(= w (group-weight a))", "(= w (group-weight c))",
            *(("(= b (group-bias a))", "(= b (group-bias c))") if bias else ()))
    params = ("w", "b") if bias else ("w",)
    y = f"(Op k {args('(Cat xs)', *params)})"  # [n, g, o]
    return [
        seed(f"batch-linear-shared-last{suffix}",
             (*member, "(= p (pos a))", "(= p (group-last s))", "(> (group-first s) p)"),
             ("(group-shares-weights a)", "(set (group-inputs-dim1 a) (Cons (Unsqueeze x 1) (Nil) 1))"), covers="new"),
        seed(f"batch-linear-shared{suffix}",
             (*member, "(= q (group-next a))", "(= q (pos c))", "(group-shares-weights c)",
              "(= xs (group-inputs-dim1 c))", *same),
             ("(group-shares-weights a)", "(set (group-inputs-dim1 a) (Cons (Unsqueeze x 1) xs 1))"), covers="new"),
        seed(f"batch-linear-as-select-of-shared{suffix}",
             (*group_member(form, params), "(group-shares-weights hd)", "(= xs (group-inputs-dim1 hd))"),
             (f"(let y {y})", "(union a (Squeeze (Sl y 1 m 1) 1))", *shape("y", "ngo")), covers="new"),
    ]


RULES += [*shared_linear(bias=True), *shared_linear(bias=False)]
