"""Inductor's fusion, simulated on a concrete term DAG: the kernels it will generate.

What Inductor does, as modelled here (``optimus_egg.bench.calibrate`` checks the model against
Inductor on micro-graphs):

- Views (slices, squeezes, reshapes that alias) are free: a consumer reads through them. A
  ``Move`` (a dim moved, written out in order) is a pointwise copy, which fuses like one;
  where only batched matmuls read it, its last dim left last, a view (the backend hands them
  the ``movedim``).
- Pointwise ops fuse with the pointwise producers they read whole into one kernel. Fusion never
  crosses an extern call or a cat: a kernel cannot run both before and after one ("depth", the
  number of such barriers on the longest path, must match). A pointwise producer read in slices,
  or from another depth, is recomputed inside its reader (Inductor inlines it), so it needs a
  kernel of its own only when something must read it from memory: an extern call, a cat slot, a
  graph output. On CPU, a result whose expression calls ``exp`` or ``sigmoid`` and that several
  ops read is stored instead (a loop of its own where they read slices).
- Kernels that read the same tensor through the same view with the same number of elements fuse
  horizontally; so do kernels reading slices of one gather (``embedding``) or reduction result.
- A reduction of fewer than 8 elements per output element is unrolled into a pointwise op
  (an unrolled softmax stores its exponentials: a loop of its own, then one for the rest).
  Reductions fuse only over the same range (elements read, written, and reduced per output).
- A reduction is one kernel; pointwise producers fuse in (prologue); a pointwise consumer fuses
  after it (epilogue) unless a later reduction takes that consumer in as its prologue (softmax's
  division then moves into the consumer). Reductions never fuse side by side.
- Matmuls, convolutions and other calls Inductor hands to a library or to ATen ("extern") are
  one launch each and never fuse. ``linear`` with a bias on a 3-D input that is not a reshape of
  a computed tensor (a transpose, a slice) is a ``bmm`` plus a pointwise bias add (on a reshape,
  one ``addmm`` of its flattened rows); ``embedding_bag`` on 2-D indices also prepares its
  offsets in a kernel.
- ``cat`` on CPU is always a ``ConcatKernel``: every piece is written into its slot by one
  kernel, which is the piece's own pointwise or reduction kernel when the piece is one (not a
  slice of one), nothing when the piece is a matmul's result (the library call writes in place),
  and a copy otherwise (ATen fallbacks such as ``embedding_bag`` cannot write in place). A
  matmul's result unsqueezed (a stack) is written in place too, and then read whole; copies of
  one piece into several cats are one loop.
  On CUDA a cat of at most 8 pieces is lowered as a pointwise op (masked loads) and fuses.
- Except what the backend's post-grad pass rewrites first (:func:`optimus_egg.cleanup.scatter_input_stacks`):
  a cat along dim 0 of up to :data:`MAX_SCATTERED` graph inputs (a batched layer's weights,
  stacked or concatenated) that only matmuls read is one kernel that scatters them, on every device.

On CPU, ``torch._inductor.metrics.generated_kernel_count`` also counts the loop-fusion attempts
the C++ backend makes for a reduction with an epilogue (:data:`CPU_REDUCTION_OBJECTS`);
:attr:`Prediction.objects` reproduces that figure for calibration, :attr:`Prediction.kernels` is
what runs (one launch each on a GPU).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.utils import _pytree as pytree

from optimus_egg.calls import Registry, Slot
from optimus_egg.extract.dag import Dag, Fact, Facts, items, tensor_args
from optimus_egg.extract.kernels import (CPU_EPILOGUE_OBJECTS, CPU_MOVED_OBJECTS, CPU_REDUCTION_OBJECTS,
                                         CPU_UNROLLED_OBJECTS, CUDA_POINTWISE_CAT, MAX_SCATTERED, REALIZED_READS,
                                         RESHAPES, UNROLLED_REDUCTION, Group, Prediction, UnionFind, kind_of,
                                         numel_of, rebase, reshaped, unreshaped)
from optimus_egg.ir import Term
from optimus_egg.optable import (BATCHED_MATMULS, HEAVY_OPS, INDIRECT, MATMULS, TWO_PASS,
                                 keeps_last_dim, unit_reshape)

def predict(dag: Dag, registry: Registry, weights: dict[str, float], device: str) -> Prediction:
    """The kernels Inductor generates for ``dag`` on ``device``, each weighted by its category."""
    sim = Simulation(registry, weights, device, dag.facts)
    sim.count_readers(dag.order, dag.roots)
    for term in dag.order:
        sim.visit(term)
    for root in dag.roots:
        sim.use(root, None)
    return sim.result()


class Simulation:
    """One pass over a DAG in topological order, grouping terms into kernels."""

    def __init__(self, registry: Registry, weights: dict[str, float], device: str, facts: Facts) -> None:
        self.registry, self.weights, self.device = registry, weights, device
        self.facts = dict(facts)  # (with the facts it derives)
        self.uf = UnionFind()
        self.kind: dict[Term, str] = {}
        self.src: dict[Term, Term] = {}  # a view -> the term it views
        self.depth: dict[Term, int] = {}
        self.group: dict[Term, int] = {}
        self.extern = 0
        self.weighted_extern = 0.0
        self.horizontal: dict[tuple[Any, ...], int] = {}
        self.epilogues: list[tuple[Term, Term]] = []  # (pointwise reader, reduction), decided last
        self.moved: set[Term] = set()  # reductions whose pointwise tail a later kernel computes
        self.readers: dict[Term, int] = {}  # a term -> how many terms (or outputs) read it
        self.users: dict[Term, int] = {}  # ... directly, a view being one (Inductor's users of its node)
        self.loads: dict[Term, frozenset[Term]] = {}  # a pointwise term -> what its code loads, producers inlined
        self.not_matmul_read: set[Term] = set()  # terms something other than a library matmul reads
        self.numels: dict[Term, int | None] = {}
        self.pieces: dict[Term, list[Term]] = {}  # a CPU cat -> its pieces that matmuls wrote
        self.distributed: set[Term] = set()  # pointwise ops computed piece by piece (see distribute)
        self.slotted: set[Term] = set()  # pointwise and reduction terms that write a cat slot
        self.heavy: set[Term] = set()  # pointwise terms whose expression (inlined producers too) calls a heavy op
        self.move_readers: dict[Term, list[Term | None]] = {}  # a Move (or a unit reshape of one) -> its readers

    def fact(self, term: Term) -> Fact | None:
        """``term``'s shape and dtype: its fact, or for a pointwise call a rule made (which FX
        gave none), its operands' broadcast shape."""
        got = self.facts.get(term)
        if (got is None and term.op == "Op" and term.args[0] in self.registry.calls  # (not a kernel it made up)
                and kind_of(self.registry, "Op", term.args[0]) == "pointwise"):
            known = [self.facts.get(a) for a in self.reads(term)]
            if known and all(f is not None and None not in f[0] for f in known):
                try:
                    shape = tuple(torch.broadcast_shapes(*(f[0] for f in known)))  # type: ignore[index]
                except RuntimeError:
                    return None
                got = self.facts[term] = (shape, known[0][1])  # type: ignore[index]
        return got

    def numel(self, term: Term) -> int | None:
        if term not in self.numels:
            self.numels[term] = numel_of(self.fact(term))
        return self.numels[term]

    def reads(self, term: Term) -> list[Term]:
        """The tensors ``term`` computes from: an opaque call's list also holds the effect it is
        ordered after, which is no operand (Inductor functionalizes in-place calls)."""
        args = tensor_args(term)
        if term.op != "Op":
            return args
        slots = [leaf.index for leaf in self.registry.calls[term.args[0]].leaves if isinstance(leaf, Slot)]
        return args[: max(slots, default=-1) + 1]

    def count_readers(self, order: list[Term], roots: list[Term]) -> None:
        views: dict[Term, Term] = {}
        for term in order:
            op = term.op
            kind = kind_of(self.registry, op, term.args[0] if op in ("Unary", "Binary", "Op") else None)
            args = self.reads(term) if kind != "list" else []
            for a in args:
                if a in self.move_readers:
                    self.move_readers[a].append(term)
            if op == "Move" or kind == "view" and args and args[0] in self.move_readers and self._unit_reshape(term):
                self.move_readers[term] = []
            if kind != "list":
                for a in set(args):
                    self.users[a] = self.users.get(a, 0) + 1
            if kind == "view" and args:
                views[term] = views.get(args[0], args[0])
            elif kind != "list":
                for a in set(views.get(a, a) for a in args):
                    self.readers[a] = self.readers.get(a, 0) + 1
                self.not_matmul_read.update(views.get(a, a) for i, a in enumerate(args)
                                            if not self._library_operand(term, kind, i))
        for r in roots:
            if r in self.move_readers:
                self.move_readers[r].append(None)
            self.users[r] = self.users.get(r, 0) + 1
            r = views.get(r, r)
            self.readers[r] = self.readers.get(r, 0) + 1
            self.not_matmul_read.add(r)

    def _library_operand(self, term: Term, kind: str, i: int) -> bool:
        """Does ``term`` hand its ``i``-th tensor argument to a library matmul as it is? Not a
        ``linear``'s bias on a 3-D input that is not a reshape: a pointwise kernel adds it."""
        if kind != "matmul":
            return False
        call = self.registry.calls[term.args[0]]
        if call.name not in MATMULS:
            return False
        x = tensor_args(term)[0]
        return not (call.name == "linear" and i == 2 and self._batched(x))

    def _batched(self, x: Term) -> bool:
        """Is ``x``, a ``linear``'s input, of rank 3 or more and not the rows of a computed tensor
        as they lie (a reshape of it)? Inductor then runs a ``bmm`` and adds the bias after it."""
        return len((self.fact(x) or ((0, 0), ""))[0]) > 2 and unreshaped(x) is not self.src.get(x)

    def level(self, term: Term) -> int:
        """The depth at which a reader of ``term`` runs: after an extern call or a cat kernel."""
        s = self.src[term]
        return self.depth[s] + (self.kind[s] in ("extern", "matmul", "cat-kernel"))

    def use(self, term: Term, reader: Term | None) -> None:
        """``reader`` (None: the graph's output) reads ``term``: its kernel must run."""
        s = self.src.get(term, term)
        if s in self.group and (reader is None or self.group.get(reader) is None
                                or self.uf.find(self.group[reader]) != self.uf.find(self.group[s])):
            self.uf.groups[self.uf.find(self.group[s])].needed = True

    def new_group(self, term: Term, kind: str, depth: int) -> int:
        g = self.uf.new(Group(kind))
        self.group[term] = g
        self.depth[term] = depth
        return g

    def fuse_in(self, term: Term, args: list[Term], numel: int | None = None) -> None:
        """Vertical fusion with the pointwise/reduction producers it reads whole at the same
        depth; a slice of a pointwise producer is recomputed inside this kernel instead (the
        producer is inlined, as Inductor does, so pieces of one op stay separate kernels).
        Then horizontal fusion with kernels that read the same tensor through the same view
        (``numel``: the elements the kernel writes, when ``term`` has no fact of its own)."""
        g = self.group[term]
        numel = numel if numel is not None else self.numel(term)
        inlined = set()
        for a in args:
            s = self.src[a]
            fusible = s in self.group and self.kind[s] in ("pointwise", "reduction")
            if fusible and self.depth[s] == self.depth[term] and self._whole(a):
                if self.kind[s] == "reduction" and self.kind[term] != "reduction":
                    self.epilogues.append((term, s))
                else:  # (reductions over other ranges stay apart, each its own loops)
                    self.uf.union(g, self.group[s])
                continue
            key: tuple[Any, ...] = (unreshaped(a), numel, self.depth[term])  # reshapes keep the order read
            if fusible:
                if self.kind[s] == "pointwise" and not self.stored_for_reuse(s):
                    inlined.add(a)  # recomputed here: it needs no kernel of its own for this read
                elif self.kind[term] != "copy":
                    self.moved.add(s)  # a reduction's pointwise tail is computed here instead
                if self.kind[s] == "reduction" or self.uf.groups[self.uf.find(self.group[s])].shared:
                    # every slice reads the same row statistics / gathered table: Inductor fuses
                    # the kernels that read slices of it
                    key = ("slices of", self.uf.find(self.group[s]), numel, self.depth[term])
            elif numel is not None and (self.numel(a) or numel) < numel:
                self.uf.groups[self.uf.find(g)].shared = True  # a broadcast read
            if key not in self.horizontal:
                self.horizontal[key] = g
            elif not (self.uf.groups[self.uf.find(g)].reductions
                      or self.uf.groups[self.uf.find(self.horizontal[key])].reductions):
                self.uf.union(self.horizontal[key], g)  # reductions are not fused side by side
        for a in args:
            if a not in inlined:
                self.use(a, term)

    def read_in_place(self, move: Term) -> bool:
        """Is ``move`` read by batched matmuls alone (directly or through reshapes of size-1
        dims), its last dim left in place? The backend hands them the ``movedim`` view
        (:func:`optimus_egg.cleanup.moves_read_in_place`)."""
        fact = self.fact(move.args[0])
        return fact is not None and keeps_last_dim(len(fact[0]), *move.args[1:]) and self._batched_read(move)

    def _batched_read(self, term: Term) -> bool:
        """Is ``term`` read by batched matmuls alone, directly or through reshapes of size-1 dims
        (never an output, ``None``: a fresh tensor)?"""
        def reader(r: Term | None) -> bool:
            if r is None:
                return False
            if r in self.move_readers:
                return self._batched_read(r)
            return r.op in ("Unary", "Binary", "Op") and self.registry.calls[r.args[0]].name in BATCHED_MATMULS

        readers = self.move_readers[term]
        return bool(readers) and all(reader(r) for r in readers)

    def _unit_reshape(self, view: Term) -> bool:
        """Does ``view`` only add or drop dims of size 1 (a view of any strided tensor)?"""
        fact, inner = self.fact(view), self.fact(tensor_args(view)[0])
        if view.op not in RESHAPES or fact is None or inner is None:
            return False
        return unit_reshape(fact[0], inner[0])

    def stored_for_reuse(self, term: Term) -> bool:
        """Inductor stores a pointwise result that several ops read when its expression loads more
        than ``REALIZED_READS`` tensors or (CPU) calls a heavy op (``HEAVY_OPS``): too dear to
        recompute in each reader, it is a loop of its own wherever the readers do not read it whole."""
        return self.users.get(term, 0) > 1 and (self.device == "cpu" and term in self.heavy
                                                 or len(self.loads.get(term, ())) > REALIZED_READS)

    def _whole(self, view: Term) -> bool:
        """Does ``view`` show all of the tensor it views (a reshape, not a slice)?"""
        return view is self.src[view] or self.numel(view) == self.numel(self.src[view])

    def visit(self, term: Term) -> None:
        op = term.op
        key = term.args[0] if op in ("Unary", "Binary", "Op") else None
        kind = kind_of(self.registry, op, key)
        if kind == "list":
            return
        args = self.reads(term)
        for before in tensor_args(term)[len(args):]:
            self.use(before, None)  # an effect it is ordered after (frontend): it runs, as the program's does
        if op == "Move" and self.read_in_place(term):
            kind = "view"
        if kind in ("view", "input"):
            self.kind[term] = kind
            self.src[term] = self.src[args[0]] if kind == "view" and args else term
            if term is self.src[term]:
                self.depth[term] = 0
            return
        self.src[term] = term
        depth = max((self.level(a) for a in args), default=0)
        call = self.registry.calls[key] if key is not None else None
        if kind == "cat":
            self.visit_cat(term, args, depth)
            return
        unrolled = kind == "reduction" and self.unrolled(call, args[0], term)
        kind = "pointwise" if unrolled else kind
        self.kind[term] = kind
        if kind == "pointwise" and self.distribute(term, args):
            return
        if kind == "pointwise" and (call is not None and call.name in HEAVY_OPS
                                    or any(self.src[a] in self.heavy for a in args)):
            self.heavy.add(term)
        if kind == "pointwise":
            self.loads[term] = frozenset().union(*(
                self.loads[s] if s in self.loads and not self.stored_for_reuse(s) else {a}
                for a, s in ((a, self.src[a]) for a in args)))
        if kind in ("pointwise", "reduction"):
            g = self.new_group(term, kind, depth)
            self.uf.groups[g].shared = call is not None and call.name in INDIRECT
            if unrolled:  # a softmax reads its exponentials once per element of a row: they are
                # stored (one loop), and a reader at another depth recomputes the rest
                self.uf.groups[g].stored = call.name in TWO_PASS
                self.uf.groups[g].objects = CPU_UNROLLED_OBJECTS.get(call.name, 1)
            if kind == "reduction":
                group = self.uf.groups[g]
                group.reductions.append(term)
                group.signature = (self.numel(args[0]) or -1, self.numel(term) or -1,
                                   self.reduced(call, args[0], term) or -1)
                group.needed = True
            self.fuse_in(term, args)
            return
        # matmul / extern: one launch; its operands must exist.
        self.depth[term] = depth
        self.extern += 1
        self.weighted_extern += self.weights[kind]
        for a in args:
            self.use(a, term)
        assert call is not None
        n_tensors = sum(isinstance(x, Slot) for x in call.leaves)
        rank = len(self.fact(args[0])[0]) if args and self.fact(args[0]) else 2
        if call.name == "linear" and n_tensors >= 3 and self._batched(args[0]):
            # a bmm, then the bias added by a pointwise kernel that fuses with the consumers
            self.kind[term] = "pointwise"
            self.depth[term] = depth + 1
            self.new_group(term, "pointwise", depth + 1)
        elif call.name == "embedding_bag" and rank == 2:
            # 2-D indices: the offsets are prepared by a kernel, and indices that are a slice of
            # a larger tensor are copied to a contiguous buffer by another
            for what in ("<offsets>", "<indices>")[: 1 + (not self._whole(args[0]))]:
                prep = Term("Op", (what, term))
                self.kind[prep], self.src[prep] = "pointwise", prep
                self.uf.groups[self.new_group(prep, "pointwise", depth)].needed = True
                self.fuse_in(prep, args[:1] if what == "<indices>" else [], self.numel(args[0]))

    def unrolled(self, call: Any, x: Term, term: Term) -> bool:
        """Does Inductor unroll this reduction into a pointwise op: fewer than
        ``unroll_reductions_threshold`` (8) elements reduced per output element, more than one
        output element? (A softmax over 4 gates is a pointwise kernel, not 4 loops.)"""
        n_out, reduced = self.numel(term), self.reduced(call, x, term)
        return n_out is not None and n_out > 1 and reduced is not None and reduced < UNROLLED_REDUCTION

    def reduced(self, call: Any, x: Term, term: Term) -> int | None:
        """The elements this reduction of ``x`` reduces per output element (None: unknown)."""
        n_in, n_out, fact = self.numel(x), self.numel(term), self.fact(x)
        if n_in is None or n_out is None or fact is None or n_out == 0:
            return None
        if n_out < n_in:
            return n_in // n_out
        # the reduction keeps the shape: the reduced size is the dim (or shape) it names
        args, kwargs = pytree.tree_unflatten(list(call.leaves), call.spec)
        if call.name in TWO_PASS:
            dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
            return fact[0][dim] if isinstance(dim, int) and -len(fact[0]) <= dim < len(fact[0]) else None
        if call.name == "layer_norm":
            shape = kwargs.get("normalized_shape", args[1] if len(args) > 1 else None)
            return math.prod(shape) if isinstance(shape, (list, tuple)) else None
        return None

    def distribute(self, term: Term, args: list[Term]) -> bool:
        """CPU: a pointwise op that alone reads a whole cat with matmul pieces is computed piece
        by piece by the kernels that write the cat's slots; each matmul's piece gets a kernel of
        its own (``relu(cat(mm, mm))`` is two kernels)."""
        if self.device != "cpu":
            return False
        cats = [self.src[a] for a in args if self.kind[self.src[a]] == "cat-kernel" and self._whole(a)
                and self.readers.get(self.src[a]) == 1]
        if len(cats) != 1 or not self.pieces.get(cats[0]):
            return False  # (without matmul pieces the op reads the cat like any buffer)
        cat = cats[0]
        if cat not in self.distributed:  # (a second op joins the kernels the first one made)
            for piece in self.pieces[cat]:
                write = Term("Op", ("<piece>", piece, term))
                self.kind[write], self.src[write] = "pointwise", write
                self.uf.groups[self.new_group(write, "pointwise", self.level(piece))].needed = True
                self.fuse_in(write, [piece])
        self.distributed.add(term)
        self.pieces[term] = self.pieces[cat]
        self.kind[term], self.src[term], self.depth[term] = "cat-kernel", term, self.depth[cat]
        return True

    def visit_cat(self, term: Term, args: list[Term], depth: int) -> None:
        if self.scattered(term, args):
            self.kind[term] = "copy"
            self.uf.groups[self.new_group(term, "copy", depth)].needed = True
            return
        if self.device == "cuda" and len(args) <= CUDA_POINTWISE_CAT:
            self.kind[term] = "pointwise"
            self.new_group(term, "pointwise", depth)
            self.fuse_in(term, args)
            return
        self.kind[term] = "cat-kernel"
        self.depth[term] = depth
        self.pieces[term] = []
        for slot, a in enumerate(args):
            s = self.src[a]
            whole = self.numel(a) == self.numel(s)
            if a is s and self.kind[s] == "matmul":
                self.pieces[term].append(a)
                continue  # a library matmul writes its result into the slot (out=); a fallback can't
            if self.kind[s] == "matmul" and whole and reshaped(a, s):
                continue  # ... unsqueezed too (a stack), but Inductor then reads the cat whole
            if whole and self.kind[s] in ("pointwise", "reduction") and (s not in self.slotted or tensor_args(s)):
                self.uf.groups[self.uf.find(self.group[s])].needed = True  # it writes its slot
                self.slotted.add(s)
                continue
            write = Term("Op", ("<copy>", a, term, slot))
            self.kind[write], self.src[write] = "copy", write
            inlined = self.kind[s] == "pointwise" and not self.stored_for_reuse(s)  # a piece of it is recomputed
            g = self.new_group(write, "copy", self.depth[s] if inlined else self.level(a))
            self.uf.groups[g].needed = True
            if not inlined:
                self.fuse_in(write, [a], self.numel(a))
            elif not tensor_args(s):
                pass  # a constant written into another slot: its loop shares no read with another
            elif (key := (self.region(a), self.numel(a), self.depth[write])) in self.horizontal:
                self.uf.union(self.horizontal[key], g)  # a loop reads the same region (one piece, several cats)
            else:
                self.horizontal[key] = g

    def region(self, piece: Term) -> Term:
        """What copying ``piece``, a view of a pointwise op, reads: the same view of the op's
        one operand where the op maps it element by element (``clone(x)[i]`` reads ``x[i]``, and
        fuses with a copy of ``x[i]``), reshapes dropped."""
        s = self.src[piece]
        reads = self.reads(s)
        if len(reads) != 1 or self.numel(reads[0]) != self.numel(s):
            return unreshaped(piece)
        return unreshaped(rebase(piece, s, reads[0]))

    def scattered(self, term: Term, args: list[Term]) -> bool:
        """Is the cat ``term`` one the backend scatters from its pieces in one kernel: along dim
        0, of at most :data:`MAX_SCATTERED` graph inputs of static shapes (each whole, equal
        but for dim 0, or each unsqueezed at 0, equal), read only by library matmuls?"""
        sources = [self.src[a] for a in args]
        if (items(term.args[-1])[1] != 0 or not 1 < len(args) <= MAX_SCATTERED or term in self.not_matmul_read
                or any(self.kind[s] != "input" for s in sources)):
            return False
        facts = [self.fact(s) for s in sources]
        if any(f is None or not f[0] or None in f[0] for f in facts):
            return False
        if all(a.op == "Unsqueeze" and a.args[0] is s and a.args[1] == 0 for a, s in zip(args, sources)):
            return len(set(facts)) == 1
        return all(a is s for a, s in zip(args, sources)) and len({(f[0][1:], f[1]) for f in facts}) == 1

    def result(self) -> Prediction:
        # A pointwise op after a reduction fuses into the reduction's kernel (an epilogue) unless
        # a later reduction already took it in (a prologue): then the first reduction's kernel
        # ends before its own pointwise tail (softmax's division moves into the consumer).
        moved = {self.uf.find(self.group[r]) for r in self.moved}
        absorbed = {reader for reader, _ in self.epilogues
                    if self.uf.groups[self.uf.find(self.group[reader])].reductions}
        for reader, reduction in self.epilogues:
            if reader in absorbed:
                moved.add(self.uf.find(self.group[reduction]))
            elif self.uf.union(self.group[reader], self.group[reduction]):
                self.uf.groups[self.uf.find(self.group[reader])].epilogue = True
        out = Prediction(extern=self.extern, weighted=self.weighted_extern)
        w = self.weights
        roots = {self.uf.find(g) for g in self.group.values()}
        for r in roots:
            g = self.uf.groups[r]
            if not (g.needed or g.stored):
                continue  # inlined into every reader
            out.kernels += 1
            out.weighted += w[g.kind]
            if self.device == "cpu" and g.reductions:
                names = [self.registry.calls[t.args[0]].name for t in g.reductions]
                base = max(CPU_REDUCTION_OBJECTS.get(name, 1) for name in names)
                if g.epilogue:
                    out.objects += CPU_EPILOGUE_OBJECTS if base == 1 else base
                else:
                    out.objects += max(CPU_MOVED_OBJECTS.get(name, 1) for name in names) if r in moved else base
            else:
                out.objects += g.objects if self.device == "cpu" and g.needed else 1
        return out
