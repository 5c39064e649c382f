"""The kernels of the fusion simulation (:mod:`optimus_egg.extract.fusion`): what kind of kernel
a term is and the views it reads through, groups of terms that Inductor writes as one kernel,
merged by a union-find, what each counts on a CPU, and the prediction they add up to."""

from __future__ import annotations

from dataclasses import dataclass, field

from optimus_egg.calls import Registry
from optimus_egg.extract.cost import category
from optimus_egg.extract.dag import Fact, tensor_args
from optimus_egg.ir import Term
from optimus_egg.optable import FREE_CONSTRUCTORS

#: Kernel objects the CPU backend counts for one reduction kernel, by op (1 when not listed).
CPU_REDUCTION_OBJECTS = {"mean": 4, "norm": 4, "softmax": 4, "var": 6, "std": 6, "log_softmax": 8,
                         "layer_norm": 8, "group_norm": 8, "normalize": 3, "cosine_similarity": 4}
#: ... for one whose pointwise tail a later kernel computes (1 when not listed): a layer norm
#: keeps its statistics' loops.
CPU_MOVED_OBJECTS = {"layer_norm": 6}
#: ... and for a single-loop reduction that gets a pointwise epilogue fused after it.
CPU_EPILOGUE_OBJECTS = 4
#: Inductor writes a reduction of fewer elements than this (per output element) as a pointwise
#: op, unrolled (``config.unroll_reductions_threshold``).
UNROLLED_REDUCTION = 8
#: Loop nests the CPU backend writes for such an op unrolled (1 when not listed).
CPU_UNROLLED_OBJECTS = {"softmax": 2, "log_softmax": 4, "layer_norm": 3}
#: A pointwise result several ops read is stored where its code loads more tensors than this
#: (``config.realize_reads_threshold``).
REALIZED_READS = 4
#: CUDA lowers a cat of at most this many pieces as one pointwise kernel.
CUDA_POINTWISE_CAT = 8
#: The most graph inputs the backend's post-grad pass (:func:`optimus_egg.cleanup.scatter_input_stacks`)
#: scatters into one stack in one kernel: each element of it tests its slot once per input. Twice
#: Inductor's own one-kernel cat on GPUs (``config.max_pointwise_cat_inputs``): the concatenated
#: weights of a model's parallel linears are often a few more than 8, and copied, each would be a
#: kernel of its own.
MAX_SCATTERED = 16


def numel_of(fact: Fact | None) -> int | None:
    if fact is None or any(s is None for s in fact[0]):
        return None
    n = 1
    for s in fact[0]:
        n *= s  # type: ignore[operator]
    return n


def kind_of(registry: Registry, op: str, key: object = None) -> str:
    """``view`` | ``pointwise`` | ``reduction`` | ``matmul`` | ``extern`` | ``cat`` | ``input``
    | ``list``."""
    if op == "Input":
        return "input"
    if op in ("Cons", "Nil"):
        return "list"
    if op in FREE_CONSTRUCTORS:
        return "view"
    if op == "Move":  # a copy in another order: a pointwise loop, which fuses
        return "pointwise"
    if op == "Cat":
        return "cat"
    return category(registry.calls[key])  # type: ignore[index]


#: Views that keep the order of the elements they show.
RESHAPES = frozenset({"Unsqueeze", "Squeeze", "Flat", "Unflat"})


def unreshaped(view: Term) -> Term:
    """``view`` without the reshapes on top of it (a stack's piece: the slice it unsqueezes)."""
    while view.op in RESHAPES:
        view = view.args[0]
    return view


def reshaped(view: Term, base: Term) -> bool:
    """Is ``view`` ``base`` through reshapes alone: can a matmul write ``base`` into a slot
    that ``view`` fills?"""
    return unreshaped(view) is base


def rebase(view: Term, base: Term, new: Term) -> Term:
    """``view`` of ``base`` as the same view of ``new``."""
    if view is base:
        return new
    inner = tensor_args(view)[0]
    return Term(view.op, tuple(rebase(inner, base, new) if a is inner else a for a in view.args))


@dataclass
class Prediction:
    kernels: int = 0  # generated kernels (fused): one launch each on a GPU
    extern: int = 0  # extern / fallback calls
    objects: int = 0  # what metrics.generated_kernel_count reports on this device
    weighted: float = 0.0  # kernels and extern calls weighted by their category

    @property
    def launches(self) -> int:
        return self.kernels + self.extern

    def figure(self, device: str) -> float:
        """The figure to minimize: on CPU the kernel objects and extern calls Inductor generates
        (what a GPU would launch, and what compile time follows), elsewhere the launches."""
        return float(self.objects + self.extern) if device == "cpu" else self.weighted


@dataclass
class Group:
    """Terms Inductor writes as one kernel."""

    kind: str  # "pointwise" | "reduction" | "copy"
    reductions: list[Term] = field(default_factory=list)
    signature: tuple[int, int, int] | None = None  # (elements read, written, reduced per output) of its reductions
    needed: bool = False  # something outside the group reads it, or it writes a cat slot / output
    epilogue: bool = False  # a member reads a reduction of the same group
    shared: bool = False  # it reads something every slice of it reads too (a gather, a broadcast)
    objects: int = 1  # CPU loop nests when it has no reduction and is needed (an unrolled softmax: 2)
    stored: bool = False  # it writes an intermediate even when every reader recomputes it


class UnionFind:
    """The groups, merged as the simulation fuses them."""

    def __init__(self) -> None:
        self.parent: list[int] = []
        self.groups: list[Group] = []

    def new(self, group: Group) -> int:
        self.parent.append(len(self.parent))
        self.groups.append(group)
        return len(self.parent) - 1

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, a: int, b: int) -> bool:
        """Merge two groups unless they hold reductions over different ranges."""
        a, b = self.find(a), self.find(b)
        if a == b:
            return True
        ga, gb = self.groups[a], self.groups[b]
        if ga.signature is not None and gb.signature is not None and ga.signature != gb.signature:
            return False
        self.parent[b] = a
        ga.reductions += gb.reductions
        ga.signature = ga.signature or gb.signature
        ga.needed |= gb.needed
        ga.epilogue |= gb.epilogue
        ga.shared |= gb.shared
        ga.objects = max(ga.objects, gb.objects)
        ga.stored |= gb.stored
        if gb.kind == "reduction" or (gb.kind == "pointwise" and ga.kind == "copy"):
            ga.kind = gb.kind
        return True
