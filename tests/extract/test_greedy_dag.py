"""The extractor pays for a shared subterm once and never returns a cycle."""

import torch

from optimus_egg.egraph import ENode
from optimus_egg.extract.greedy_dag import _bits, _class_kids, extract, extract_apart
from tests.helpers import frozen



def cost(node):
    return {"Input": 0.0, "Unary": 1.0, "Binary": 1.0}[node.op]


def test_shared_subterm_is_paid_once():
    # class 3 = f(s) + f(s) with s = g(x) shared; class 3 also = h(x) + k(x) with h, k separate.
    # Tree cost: option A = 1 + 2*(1 + 1) = 5, option B = 1 + 1 + 1 = 3; DAG cost: A = 3 (s once)...
    nodes = [ENode("Input", (0,), 0),
             ENode("Unary", ("g", 0), 1),  # s
             ENode("Binary", ("add", 1, 1), 3),  # s + s: DAG cost 2
             ENode("Unary", ("h", 0), 4), ENode("Unary", ("k", 0), 5),
             ENode("Binary", ("add", 4, 5), 3)]  # h(x) + k(x): cost 3
    ex = extract(frozen(nodes), [3], cost)
    assert ex.choice[3] == 2 and ex.cost == 2


def test_cycle_is_never_extracted():
    # class 1 = u(1) (a self-loop) or u(0): only the second is a term.
    nodes = [ENode("Input", (0,), 0), ENode("Unary", ("u", 1), 1), ENode("Unary", ("u", 0), 1)]
    ex = extract(frozen(nodes), [1], cost)
    assert ex.choice[1] == 2


def test_pieces_of_a_tensor_computed_anyway_are_views_of_it_not_recomputed():
    """In the zoo's sequence model, h = stack(tanh(step)) becomes one tanh, and the pieces of h
    read later must be slices of that tanh. Greedy prices each piece with h's whole sub-DAG and
    chose to recompute tanh per piece (ten tanh kernels more than needed)."""
    from optimus_egg.bench.zoo import sequence
    from tests.helpers import check

    model, inputs = sequence()()
    with torch.no_grad():  # (in training the forward ties, and the graph is kept)
        report, gm = check(model, *inputs)
    tanhs = [n for n in gm.graph.nodes if "tanh" in str(n.target)]
    assert len(tanhs) == 1, gm.code


def test_one_op_that_several_outputs_are_views_of_is_built_when_it_costs_less():
    from tests.extract.test_ilp import _sharing_graph, cost as ilp_cost

    graph, roots = _sharing_graph(), [4, 5, 6]
    ex = extract(graph, roots, ilp_cost)
    assert ex.cost == 2 and all(graph.nodes[ex.choice[c]].op == "Sl" for c in roots)


def _fusible(*extra):
    """``_sharing_graph`` (three matmuls, or slices of one fused matmul: 3 kernels apart, 2 fused)
    with ``extra`` nodes."""
    from tests.extract.test_ilp import _sharing_graph

    return frozen([*_sharing_graph().nodes, *extra])


def test_a_fused_op_is_never_built_from_its_own_members():
    # the fused class also equals a cat of the three members (as a stack of the members' own
    # outputs can): one kernel, but only by computing the members first
    from tests.extract.test_ilp import cost as ilp_cost

    graph = _fusible(ENode("Nil", (), 30), ENode("Cons", (6, 30, 1), 31), ENode("Cons", (5, 31, 1), 32),
                     ENode("Cons", (4, 32, 1), 33), ENode("Op", ("cat", 33), 8),
                     ENode("Sl", (8, 1, 0, 12), 8))  # and a full slice of itself, as slice-full makes it
    ex = extract(graph, [4, 5, 6], ilp_cost)
    assert ex.cost == 2 and graph.nodes[ex.choice[8]].op == "Binary"


def test_of_fused_ops_that_the_same_classes_are_views_of_the_cheapest_is_built():
    # the three matmuls are also slices of one op of x and the first weight (class 9: one
    # kernel, where the matmul on concatenated weights, class 8, is two); class 8's slices are
    # found first
    from tests.extract.test_ilp import cost as ilp_cost

    graph = _fusible(ENode("Binary", ("f", 0, 1), 9), *(ENode("Sl", (9, 1, 4 * i, 4), 4 + i) for i in range(3)))
    ex = extract(graph, [4, 5, 6], ilp_cost)
    assert ex.cost == 1 and all(graph.nodes[ex.choice[c]].children[0] == 9 for c in (4, 5, 6))


def test_views_of_each_other_never_stand_in_for_a_class():
    # class 10 = g(x), or a view of 11; 11 and 13 are only views of each other (no term)
    from tests.extract.test_ilp import cost as ilp_cost

    graph = _fusible(ENode("Unary", ("g", 0), 10), ENode("Sl", (11, 0, 0, 1), 10), ENode("Sl", (13, 0, 0, 1), 11),
                     ENode("Sl", (11, 0, 0, 1), 13), ENode("Unary", ("f", 10), 12))
    ex = extract(graph, [4, 5, 6, 12], ilp_cost)
    assert ex.cost == 2 + 2 and graph.nodes[ex.choice[10]].op == "Unary"


def test_reach_walk_prunes_by_post_order_and_says_yes_past_its_budget(monkeypatch):
    from optimus_egg.extract import greedy_dag

    # class i is chosen as node i: a chain 5 -> 4 -> 3 -> 2 -> 1 -> 0, a branch 6 -> 0, a leaf 7
    kids = [[], [0], [1], [2], [3], [4], [0], []]
    choice = {c: c for c in range(8)}
    order = greedy_dag._postorder([5, 6, 7], choice, kids)
    assert order[7] < order[0]  # the leaf comes first: no walk can prune down to it
    assert greedy_dag._reaches([5], {2}, choice, kids, order)
    assert not greedy_dag._reaches([6], {2}, choice, kids, order)  # 6 reads only 0, before 2 in post-order
    assert not greedy_dag._reaches([2], {5}, choice, kids, order)
    assert not greedy_dag._reaches([5], {7}, choice, kids, order)  # a walk over the whole chain
    assert greedy_dag._reaches([6, 7, 4], {2, 5}, choice, kids, order)  # one walk: 4 reads 2
    assert not greedy_dag._reaches([6, 2], {4, 7}, choice, kids, order)
    assert not greedy_dag._reaches([], {2}, choice, kids, order)
    monkeypatch.setattr(greedy_dag, "_REACH_VISITS", 2)
    assert greedy_dag._reaches([5], {7}, choice, kids, order)  # too long a walk: assumed to reach (no switch)
    assert not greedy_dag._reaches([2, 6], {7}, choice, kids, order)  # 2 classes a start: 4 classes, all seen
    assert not greedy_dag._reaches([6], {2}, choice, kids, order)  # pruned walks stay exact


def test_ties_go_to_the_op_that_moves_fewer_bytes():
    # class 2 = relu(x)[:, :2] (relu on all of x, then a view) or relu(x[:, :2]): one kernel each
    nodes = [ENode("Input", (0,), 0),
             ENode("Unary", ("relu", 0), 1), ENode("Sl", (1, 1, 0, 2), 2),
             ENode("Sl", (0, 1, 0, 2), 3), ENode("Unary", ("relu", 3), 2)]

    def kernels(node):
        return 1.0 if node.op == "Unary" else 0.0

    def moved(node):
        return {0: 0.0, 1: 2 * 4 * 12 * 4.0, 2: 0.0, 3: 0.0}.get(node.children[1], 2 * 4 * 2 * 4.0) \
            if node.op == "Unary" else 0.0

    ex = extract(frozen(nodes), [2], kernels, moved)
    assert ex.choice[2] == 4 and ex.cost == 1.0  # the bytes only break the tie; the cost is kernels


def test_an_op_pulled_out_of_a_slice_for_nothing_stays_on_the_slice():
    """tanh moves out of the slice so that cats of tanh'd pieces can merge; alone, tanh(x)[:, :2]
    costs the launch tanh(x[:, :2]) does, on six times the data (and its backward)."""
    from optimus_egg.nodes import val
    from tests.helpers import check

    def f(x):
        p = torch.split(x, 2, 1)
        return torch.cat([*p[12:], torch.tanh(p[0]), *p[:12]], 1) * 2

    x = torch.randn(4, 48)
    report, gm = check(f, x)
    tanh = [n for n in gm.graph.nodes if n.target is torch.tanh]
    assert len(tanh) == 1 and tuple(val(tanh[0]).shape) == (4, 2)


def test_an_op_on_a_view_extracted_anyway_stays_on_that_view():
    """Mamba2's gated norm: g = h.view(...) feeds both pow(g) and a later multiply. pow(g) and
    pow(h).view(...) are one kernel each, but the second computes a class nothing else reads:
    whichever greedy met first, the extraction reads the view it has anyway (CPU Inductor had
    fused the norm one loop nest better as written)."""
    for order in ((0, 1), (1, 0)):
        pows = [ENode("Unary", ("pow", 1), 2), ENode("Unflat", (3, 1, 2), 2)]
        nodes = [ENode("Input", (0,), 0), ENode("Unflat", (0, 1, 2), 1),
                 *(pows[i] for i in order), ENode("Unary", ("pow", 0), 3),
                 ENode("Binary", ("mul", 1, 2), 4)]

        def kernels(node):
            return 1.0 if node.op in ("Unary", "Binary") else 0.0

        graph = frozen(nodes)
        ex = extract(graph, [4], kernels)
        assert graph.nodes[ex.choice[2]].op == "Unary" and 3 not in _extracted(graph, ex, [4]), order
        assert ex.cost == 2.0


def test_roots_extracted_apart_cost_what_each_costs_alone():
    """discover prices many programs of one e-graph: extracted together, one program's pow may
    read a view another program extracts, and look cheaper than it is on its own."""
    nodes = [ENode("Input", (0,), 0), ENode("Unflat", (0, 1, 2), 1),
             ENode("Unflat", (3, 1, 2), 2), ENode("Unary", ("pow", 0), 3), ENode("Unary", ("pow", 1), 2),
             ENode("Binary", ("mul", 1, 1), 4)]

    def kernels(node):
        return 1.0 if node.op in ("Unary", "Binary") else 0.0

    graph = frozen(nodes)
    apart = extract_apart(graph, [2, 4], kernels)
    for root in (2, 4):
        alone = extract(graph, [root], kernels)
        assert apart[root].cost == alone.cost == 1.0
        assert _extracted(graph, apart[root], [root]) == _extracted(graph, alone, [root]), root


def _extracted(graph, ex, roots):
    seen, stack = set(), list(roots)
    while stack:
        cls = stack.pop()
        if cls not in seen:
            seen.add(cls)
            stack.extend(_class_kids(graph, ex.choice[cls]))
    return seen


def _stack_and_flat(v_first: bool):
    """v = stack(a, b) (a cat of unsqueezes) or a view of flat; flat = cat(a, b) or a view of v:
    one cat either way, and v's own cat has two e-nodes (the unsqueezes) more. ``v_first``: the
    program wrote v before flat (its refs number the written terms operands first)."""
    from optimus_egg.egraph import Frozen

    nodes = [ENode("Input", (0,), 0), ENode("Input", (1,), 1),
             ENode("Unsqueeze", (0, 1), 2), ENode("Unsqueeze", (1, 1), 3),
             ENode("Nil", (), 10), ENode("Cons", (3, 10, 1), 11), ENode("Cons", (2, 11, 1), 12),
             ENode("Cons", (1, 10, 1), 13), ENode("Cons", (0, 13, 1), 14),
             ENode("Cat", (12,), 20), ENode("Unflat", (21, 1, 2), 20),  # v
             ENode("Cat", (14,), 21), ENode("Flat", (20, 1), 21)]  # flat
    graph = frozen(nodes)
    written = [0, 1, 2, 3, 10, 11, 12, 13, 14, *((20, 21) if v_first else (21, 20))]
    return Frozen(graph.nodes, graph.classes, {ref: cls for ref, cls in enumerate(written)})


def test_a_tensor_the_program_materializes_is_not_made_a_view_of_one_it_computes_later():
    """DeepFM's v = stack(embeddings), flat = cat(unbind(v)): on an equal count of kernels the
    extractor made v a view of a materialized flat (fewer e-nodes); CPU Inductor then turns
    flat's gradient add(mm, x) into an addmm that splits a kernel (one launch more per step).
    Whichever the program computed first stays materialized, the later one becomes its view."""

    def kernels(node):
        return 1.0 if node.op == "Cat" else 0.0

    for v_first, (kept, view) in ((True, (20, 21)), (False, (21, 20))):
        graph = _stack_and_flat(v_first)
        ex = extract(graph, [20, 21], kernels)
        assert ex.cost == 1.0
        assert graph.nodes[ex.choice[kept]].op == "Cat", v_first
        assert graph.nodes[ex.choice[view]].op in ("Flat", "Unflat"), v_first


def test_deepfm_flattens_its_stacked_embeddings_for_the_deep_tower():
    """The zoo's DeepFM as optimized: the embeddings are stacked once (as written) and the deep
    tower's linear reads a view of the stack, not a cat of its own that the stack is a view of."""
    from optimus_egg.bench.zoo import deepfm
    from optimus_egg.calls import launches
    from optimus_egg.nodes import val
    from tests.helpers import check_training

    model, inputs = deepfm()()
    gm = check_training(model, *inputs, cost_model="eager")
    linear = next(n for n in gm.graph.nodes if n.target is torch._C._nn.linear)
    view = linear.args[0]
    assert launches(view) == 0, gm.code
    source = view.args[0]
    assert launches(source) == 1 and val(source).dim() == 3, gm.code


def test_bits_lists_set_positions_of_short_and_long_masks():
    """Sub-DAG masks: the short path (under 64 set bits) and the long one (a long chain's)."""
    import random

    rng = random.Random(0)
    masks = [0, 1, 1 << 70, (1 << 200) - 1] + [rng.getrandbits(n) for n in (10, 64, 65, 500, 30000)]
    for x in masks:
        assert _bits(x) == [i for i in range(x.bit_length()) if x >> i & 1]


def test_pieces_that_become_slices_of_a_later_tensor_are_not_priced(monkeypatch):
    """relu of each piece, then the cat: the pieces the program computes become slices of one
    relu, a kernel saved, not a tie, so the materialization-order tie-break leaves those slices
    at their plain cost (pricing them only made the greedy pass slower on long chains)."""
    from optimus_egg.extract import greedy_dag
    from tests.helpers import check

    seen = []
    real = greedy_dag._in_order

    def spy(graph, kids, own):
        out = real(graph, kids, own)
        seen.append((graph, own, out))
        return out

    monkeypatch.setattr(greedy_dag, "_in_order", spy)
    check(lambda x: torch.cat([p.relu() for p in x.split(3, 1)], 1), torch.randn(5, 9))
    assert seen, "the extraction did not run (served from the optimizer's cache?)"
    graph, own, out = seen[-1]
    assert sum(n.op == "Sl" for n in graph.nodes) >= 3
    assert out == own


def test_a_union_is_priced_walking_only_the_classes_that_cost_something():
    """Free classes (views, inputs) pay EPSILON each and are counted, not walked: the price is
    the sum over every class all the same, for short masks and a wide model's long ones."""
    import random

    from optimus_egg.extract.greedy_dag import EPSILON, _price

    rng = random.Random(1)
    for width in (8, 70, 3000):
        paid = {c: rng.choice([EPSILON, EPSILON, 1 + EPSILON, 2.5 + EPSILON]) for c in range(width)}
        costly = sum(1 << c for c, p in paid.items() if p != EPSILON)
        for _ in range(20):
            classes = rng.getrandbits(width)
            expected = sum(paid[c] for c in range(width) if classes >> c & 1)
            assert abs(_price(classes, costly, paid) - expected) < 1e-9
