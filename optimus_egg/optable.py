"""The op table: every op the optimizer knows, by name, with its kind and the FX targets that
spell it, and every set of op names the other modules ask about.

A node's target maps to one entry (:func:`lookup`); calls the table does not know become opaque
``Op`` terms that reproduce the original call exactly. Parsing (:mod:`optimus_egg.structural`),
call templates (:mod:`optimus_egg.calls`), effects (:mod:`optimus_egg.effects`) and ATen emission
(:mod:`optimus_egg.aten`) read their op names from here.
"""

from __future__ import annotations

import enum
import operator
from dataclasses import dataclass
from typing import Any, Sequence

import torch
import torch.fx as fx
import torch.nn.functional as F

__all__ = ["BATCHED_MATMULS", "CATS", "COMMUTATIVE", "CONTRACTIONS", "DROPOUTS", "FREE_CONSTRUCTORS",
           "GRADIENT_OF_RESULT", "GRADIENT_WITHOUT_OPERANDS", "HEAVY_OPS", "IDENTITY_VIEWS", "INDIRECT", "INPLACE_METHODS", "INPLACE_OPERATORS", "LAYOUT_READERS", "LOOP_OPS",
           "MATMULS", "MODE_SWITCHES", "NO_KERNEL", "NONNEGATIVE", "OPS", "REARRANGING", "REDUCTIONS", "SINGULAR",
           "SLICING", "TWO_PASS", "UNDECLARED_WRITES", "Kind", "OpDef", "functional_name", "keeps_last_dim", "lookup",
           "unit_reshape"]


class Kind(enum.Enum):
    """What an op costs and which rules may touch it."""

    VIEW = "view"  # never launches a kernel
    MAYBE_VIEW = "maybe_view"  # a view or a copy; the node's metadata decides
    POINTWISE = "pointwise"  # elementwise: Unary/Binary when shapes allow
    KERNEL = "kernel"  # one launch, kept as it is
    RANDOM = "random"  # draws random numbers: kept, and kept in order


@dataclass(frozen=True)
class OpDef:
    name: str
    kind: Kind
    targets: tuple[Any, ...]  # torch callables, Tensor method names (str), ATen overloads


def _ops(kind: Kind, spec: dict[str, Sequence[Any]]) -> list[OpDef]:
    return [OpDef(name, kind, tuple(targets)) for name, targets in spec.items()]


def _fn(*names: str) -> list[Any]:
    """The torch-level callables, Tensor method names and ATen ops (every overload: Inductor's
    post-grad graphs) that spell one op."""
    out: list[Any] = []
    for name in names:
        for ns in (torch, F, torch._C._nn, torch.special, torch.ops.aten):
            obj = getattr(ns, name, None)
            if obj is not None and obj not in out:
                out.append(obj)
        if hasattr(torch.Tensor, name):
            out.append(name)
    return out


_UNARY = ["relu", "sigmoid", "tanh", "neg", "negative", "exp", "exp2", "expm1", "log", "log1p",
          "log2", "log10", "abs", "sqrt", "rsqrt", "reciprocal", "sin", "cos", "tan", "sign",
          "floor", "ceil", "round", "trunc", "frac", "erf", "erfc", "square", "silu", "gelu",
          "elu", "selu", "celu", "leaky_relu", "hardtanh", "relu6", "hardsigmoid", "hardswish",
          "mish", "softplus", "softsign", "logsigmoid", "tanhshrink", "clamp", "clip",
          "clamp_min", "clamp_max", "nan_to_num", "logit", "expit"]
#: Views that are their input elementwise: Unary too, so that they move through splits and cats as
#: the pointwise ops do (``cat(p.detach() for p in split(x))`` is ``x.detach()``), at no cost.
IDENTITY_VIEWS = frozenset({"detach"})
_BINARY = {"add": [operator.add, "__add__", "__radd__"], "sub": [operator.sub, "__sub__", "__rsub__"],
           "mul": [operator.mul, "__mul__", "__rmul__"],
           "div": [operator.truediv, "__truediv__", "__rtruediv__", "true_divide"],
           "floordiv": [operator.floordiv, "floor_divide"], "pow": [operator.pow, "__pow__"],
           "maximum": [], "minimum": [], "atan2": [], "hypot": [], "fmod": [], "remainder": []}

#: Python operators that spell a kernel op (``x @ w``; its reflected form swaps the operands).
_OPERATORS = {"matmul": [operator.matmul, "__matmul__"]}

OPS: list[OpDef] = [
    *_ops(Kind.POINTWISE, {n: _fn(n) for n in _UNARY}),
    *_ops(Kind.POINTWISE, {n: [*extra, *_fn(n)] for n, extra in _BINARY.items()}),
    *_ops(Kind.VIEW, {n: _fn(n) for n in [
        "view", "permute", "transpose", "swapaxes", "swapdims", "t", "expand", "expand_as",
        "view_as", "unflatten", "movedim", "moveaxis", "squeeze", "unsqueeze", "detach", "alias",
        "narrow", "select", "split", "split_with_sizes", "chunk", "unbind", "tensor_split",
        "real", "imag", "diagonal", "slice"]}),
    *_ops(Kind.MAYBE_VIEW, {n: _fn(n) for n in [
        "reshape", "flatten", "contiguous", "to", "type", "float", "half", "double", "bfloat16",
        "int", "long", "bool", "type_as"]}),
    *_ops(Kind.KERNEL, {n: [*_OPERATORS.get(n, []), *_fn(n)] for n in [
        "linear", "addmm", "mm", "bmm", "baddbmm", "matmul", "einsum", "layer_norm",
        "group_norm", "batch_norm", "softmax", "log_softmax", "sum", "mean", "amax", "amin",
        "prod", "var", "std", "norm", "embedding", "embedding_bag", "clone", "where",
        "masked_fill", "cat", "concat", "concatenate", "stack", "cumsum", "max", "min",
        "argmax", "argmin", "topk", "sort", "gather", "index_select", "conv1d", "conv2d",
        "scaled_dot_product_attention", "normalize", "cosine_similarity", "pad", "zeros_like",
        "ones_like", "full_like", "empty_like", "one_hot"]}),
    *_ops(Kind.RANDOM, {n: _fn(n) for n in [
        "dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout",
        "rand", "randn", "randint", "rand_like", "randn_like", "randint_like", "bernoulli",
        "multinomial", "normal", "poisson", "randperm", "rrelu"]}),
]
#: Ops whose result on floating dtypes is >= 0 (never -0.0) or NaN, with a zero gradient wherever
#: it is 0: ``relu`` leaves the result and its gradient as they are (``relu`` itself on any dtype:
#: it is idempotent). Integer ``abs`` is not among them: ``abs(-128)`` is -128 in int8.
NONNEGATIVE = frozenset({"relu", "sigmoid", "exp", "abs", "softmax"})
#: Calls of one tensor whose result holds only that tensor's elements as they are (moved, repeated,
#: a subset): every fact of the elements holds for the result, where its dtype is the tensor's.
REARRANGING = frozenset({"view", "reshape", "flatten", "unflatten", "permute", "transpose", "swapaxes",
                         "swapdims", "t", "movedim", "moveaxis", "expand", "squeeze", "unsqueeze", "contiguous",
                         "clone", "diagonal"})
#: Elementwise ops of two tensors whose operands may swap (called as ``f(a, b)``, nothing else),
#: values and gradients alike.
COMMUTATIVE = frozenset({"add", "mul"})
#: Matmuls a library computes whole (Inductor's extern calls): no loop of Inductor's reads their
#: operands. ``linear`` and ``matmul`` become ``addmm``/``mm``/``bmm`` in ATen.
MATMULS = frozenset({"linear", "matmul", "mm", "addmm", "bmm", "baddbmm"})
#: Matmuls that read a batch of matrices at any batch and row strides (the library takes them as
#: they lie; the others fold a strided batch into rows with a copy).
BATCHED_MATMULS = frozenset({"bmm", "baddbmm"})


def keeps_last_dim(rank: int, source: int, destination: int) -> bool:
    """Does ``movedim(x, source, destination)`` of a rank-``rank`` tensor leave its last dim last
    (rows keep their unit stride, which a batched matmul needs to read them in place)?"""
    return rank - 1 not in (source % rank, destination % rank)


def unit_reshape(before: Sequence[Any], after: Sequence[Any]) -> bool:
    """Do two shapes differ only in dims of size 1 (a reshape between them is a view of any
    strided tensor)?"""
    return [n for n in before if n != 1] == [n for n in after if n != 1]


#: Ops a library computes whole, each one extern call for Inductor: the matmuls, and the other
#: contractions (einsum, convolutions, attention), whose operands are not always read as they lie.
#: The cost models' ``matmul`` category.
CONTRACTIONS = MATMULS | frozenset({"einsum", "conv1d", "conv2d", "scaled_dot_product_attention"})
#: Ops that copy their inputs into one new tensor along a dim: cat, its aliases, and stack.
CATS = frozenset({"cat", "concat", "concatenate", "stack"})
#: Each dropout's ``training`` default: off for the alpha dropouts (``torch.dropout`` and ATen's
#: name it ``train`` and have none).
DROPOUTS = {"dropout": True, "dropout1d": True, "dropout2d": True, "dropout3d": True,
            "alpha_dropout": False, "feature_alpha_dropout": False}
#: Elementwise ops that may blow up on values the program never gave them: a derivative that is
#: infinite at finite inputs (``1 / b`` at 0, ``sqrt`` at 0, ``exp`` past overflow), or, on
#: integers, an error (division by zero).
SINGULAR = frozenset({"div", "pow", "floordiv", "fmod", "remainder", "atan2", "hypot", "exp", "exp2", "expm1",
                      "log", "log1p", "log2", "log10", "sqrt", "rsqrt", "reciprocal", "tan", "logit"})
#: ATen ops that update a batch norm's running statistics while their schemas declare no write
#: (``native_batch_norm`` is what ``make_fx`` records for ``F.batch_norm`` in training).
UNDECLARED_WRITES = frozenset({"native_batch_norm", "batch_norm_update_stats", "_batch_norm_impl_index",
                               "cudnn_batch_norm", "miopen_batch_norm"})
#: Tensor methods that write their tensor although their names do not end in ``_``.
INPLACE_METHODS = frozenset({"__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__ipow__",
                             "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__", "__setitem__"})
#: The ``operator`` functions that write their first argument. A tuple: a call's target need not
#: be hashable.
INPLACE_OPERATORS = (operator.setitem, operator.iadd, operator.isub, operator.imul, operator.itruediv,
                     operator.ifloordiv, operator.ipow, operator.iand, operator.ior, operator.ixor,
                     operator.ilshift, operator.irshift, operator.imatmul)
#: The functional op of an ``operator`` in-place spelling (``a += b`` computes ``add``).
_INPLACE_OPERATOR_OPS = {"iadd": "add", "isub": "sub", "imul": "mul", "itruediv": "div", "ifloordiv": "floordiv",
                         "ipow": "pow", "iand": "and_", "ior": "or_", "ixor": "xor"}


def functional_name(name: str) -> str:
    """The op an in-place call computes, as Inductor functionalizes it (``iadd``, ``__iadd__``:
    ``add``; ``relu_``: ``relu``; ``and_`` is ``operator.and_``'s name, not a spelling: look the name
    up as it is first); any other name as it is."""
    bare = name.strip("_") if name.startswith("__") else name
    if bare in _INPLACE_OPERATOR_OPS:
        return _INPLACE_OPERATOR_OPS[bare]
    return name[:-1] if name.endswith("_") and not name.startswith("_") and not name.endswith("__") else name


#: Calls whose result depends on how their input is laid out in memory, not only on its values.
LAYOUT_READERS = frozenset({"as_strided", "as_strided_copy", "as_strided_scatter"})
#: The calls Dynamo writes where a ``with`` block changes how the calls after it compute: grad
#: mode (``no_grad``, ``enable_grad``, ``set_grad_enabled``), forward AD, ``autocast``,
#: ``inference_mode``, saved-tensor hooks, functorch transforms, the attention backend.
MODE_SWITCHES = frozenset({
    "_set_grad_enabled", "_set_fwd_grad_enabled", "_enter_autocast", "_exit_autocast",
    "_enter_inference_mode", "_exit_inference_mode", "set_inplace_requires_grad_allowed",
    "_saved_tensors_hooks_disable", "_saved_tensors_hooks_enable", "_vmap_increment_nesting",
    "_vmap_decrement_nesting", "_jvp_increment_nesting", "_jvp_decrement_nesting", "_enter_dual_level",
    "_exit_dual_level", "push_dynamic_layer_stack", "pop_dynamic_layer_stack", "_grad_increment_nesting",
    "_grad_decrement_nesting", "_sdpa_kernel"})
#: Reductions: a kernel of their own, whatever fuses into them.
REDUCTIONS = frozenset({"sum", "mean", "amax", "amin", "prod", "var", "std", "norm", "softmax",
                        "log_softmax", "layer_norm", "group_norm", "max", "min", "argmax", "argmin",
                        "normalize", "cosine_similarity"})
#: Ops Inductor lowers to pointwise loops (so they fuse) although eager runs them as one kernel.
LOOP_OPS = frozenset({"clone", "contiguous", "to", "type", "float", "half", "double", "bfloat16", "int",
                      "long", "bool", "type_as", "reshape", "flatten", "where", "masked_fill",
                      "zeros_like", "ones_like", "full_like", "empty_like", "one_hot", "embedding",
                      "gather", "index_select", "getitem", "pad", "batch_norm",
                      # comparisons, logic and factories Inductor generates as loops
                      "gt", "lt", "ge", "le", "eq", "ne", "logical_and", "logical_or", "logical_not",
                      "logical_xor", "bitwise_and", "bitwise_or", "bitwise_not", "bitwise_xor", "and_",
                      "or_", "invert", "isnan", "isinf", "isfinite", "lerp", "addcmul", "addcdiv",
                      "zeros", "ones", "full", "empty", "arange", "eye", "linspace", "tensor"})
#: Pointwise ops that read through an index tensor: every slice of their result reads the table.
INDIRECT = frozenset({"embedding", "gather", "index_select", "getitem"})
#: Reductions whose decomposition reads an intermediate in two passes (softmax's exponentials).
TWO_PASS = frozenset({"softmax", "log_softmax"})
#: Pointwise ops whose Inductor code calls one of the ops its CPU backend counts heavy (``exp``,
#: ``log`` of any base, ``log1p``, ``sigmoid``, ``tanh``: ``should_realize_on_reuse``): on CPU a
#: result computed with one, read by several ops, is stored once rather than recomputed in each.
HEAVY_OPS = frozenset({"exp", "sigmoid", "expit", "silu", "softplus", "mish", "logsigmoid", "softmax", "log_softmax",
                       "tanh", "tanhshrink", "log", "log2", "log10", "log1p", "logit"})
#: Ops whose gradient reads none of their tensor operands (it reads the incoming gradient alone,
#: or the result, or a mask): autograd saves no operand of theirs.
GRADIENT_WITHOUT_OPERANDS = frozenset({"add", "sub", "neg", "cat", "concat", "concatenate", "stack", "clone",
                                       "contiguous", "to", "type", "float", "double", "sum", "mean", "expand",
                                       "expand_as", "relu", "sigmoid", "expit", "tanh", "exp", "softmax",
                                       "log_softmax", "dropout"})
#: Ops Inductor's partitioner never recomputes in the backward (a cat is not on its allowlist; a
#: contraction is compute-intensive), with random ones: whatever else reads a tensor may be
#: recomputed from it, so that the tensor is what the backward saves.
NEVER_RECOMPUTED = CATS | CONTRACTIONS
#: Copies Inductor's joint-graph passes remove as no-ops (``remove_noop_ops``) before its
#: partitioner picks what to save, with a cat or stack of one tensor: what autograd saves for
#: an op reading one may be the copied tensor itself.
INDUCTOR_NO_OP_COPIES = frozenset({"clone"})
#: Ops whose gradient reads their result: autograd saves the tensor they return.
GRADIENT_OF_RESULT = frozenset({"exp", "exp2", "expm1", "tanh", "sigmoid", "expit", "softmax", "log_softmax", "sqrt",
                                "rsqrt", "reciprocal"})
#: ATen ops that launch nothing although their schema does not say so: a view whose result the
#: schema leaves unmarked (``mm`` + ``_unsafe_view`` is a 3-D ``linear`` without bias), and
#: allocations, which reserve memory and run no kernel.
NO_KERNEL = frozenset({"_unsafe_view", "empty", "empty_like", "empty_strided", "new_empty",
                       "new_empty_strided"})
#: Slicing calls: on a tensor (not a split's tuple of pieces) each is a view whose gradient is a
#: zero-filled tensor with the slice's gradient copied in.
SLICING = frozenset({torch.narrow, torch.select, operator.getitem, "narrow", "select", "__getitem__"})
#: The IR constructors that never launch a kernel by themselves.
FREE_CONSTRUCTORS = frozenset({"Input", "Sl", "Squeeze", "Unsqueeze", "Flat", "Unflat", "Cons", "Nil"})

_BY_TARGET: dict[Any, OpDef] = {}
for _op in OPS:
    for _t in _op.targets:
        _BY_TARGET.setdefault(_t, _op)
# `x[i]`, `x[a:b]` on a tensor (:func:`optimus_egg.structural.parse_getitem`), or a projection out
# of a multi-output op.
_BY_TARGET[operator.getitem] = OpDef("getitem", Kind.MAYBE_VIEW, (operator.getitem,))


def lookup(node: fx.Node) -> OpDef | None:
    """The entry of a call's target (an ATen overload: of its packet), or None."""
    if node.op not in ("call_function", "call_method"):
        return None
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        target = target.overloadpacket
    try:
        return _BY_TARGET.get(target)
    except TypeError:  # unhashable target
        return None

# The emitter's spelling of a copy in order after a move (`structural`): the unbound method.
_BY_TARGET[torch.Tensor.contiguous] = _BY_TARGET["contiguous"]
