"""The Python API: report contents, fallback with one warning, strict mode."""

import copy
import warnings

import pytest
import torch
import torch.nn.functional as F

import optimus_egg
from optimus_egg import OptimizerFallback, effects, optimize
from optimus_egg.backend import REPORTS
from optimus_egg.counting import eager_launches
from optimus_egg.bench.models import chain
from optimus_egg.pipeline import Options, capture, optimize_graph
from tests.helpers import Fn


def test_report_and_cost_model_match_measured_launches():
    model, inputs = chain(6)()
    with torch.no_grad():  # (eager launches: an inference figure, nothing saved for a backward)
        gm, report = optimize(model, inputs, cost_model="eager")
    assert report.kernels_before == eager_launches(model, *inputs)
    assert report.kernels_after == eager_launches(gm, *inputs)
    clean, _ = chain(6, clean=True)()
    assert report.kernels_after == eager_launches(clean, *inputs)  # the floor
    assert report.rules_fired and report.enodes > 0 and report.iterations > 0
    assert set(report.seconds) >= {"translate", "build", "saturate", "extract", "emit"}
    torch.testing.assert_close(gm(*inputs), model(*inputs))


def test_failure_falls_back_with_one_warning(lenient, monkeypatch):
    import optimus_egg.pipeline as opt

    def boom(*a, **k):
        raise ValueError("injected")

    monkeypatch.setattr(opt, "translate", boom)
    model = Fn(lambda x: torch.cat(torch.split(x, 2, 1), 1))
    x = torch.randn(2, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gm, report = optimize(model, (x,))
    ours = [w for w in caught if issubclass(w.category, OptimizerFallback)]
    assert len(ours) == 1 and "injected" in str(ours[0].message)
    assert report.fallback and "ValueError" in report.fallback
    torch.testing.assert_close(gm(x), model(x))


def test_a_fallback_reports_the_graph_it_returns(lenient, monkeypatch):
    """A failure after the search (here the emitter's) left the report with the figures of the
    graph it dropped, fewer kernels after than before, for a graph returned as it was."""
    import optimus_egg.pipeline as opt

    class Broken(opt.Emitter):
        def emit(self, *args, **kwargs):
            raise IndexError("injected")

    model, x = Fn(lambda x: torch.cat([p.relu() for p in torch.split(x, 2, 1)], 1)), torch.randn(2, 8)
    _, searched = optimize(model, (x,))
    assert searched.kernels_after < searched.kernels_before
    opt.cache.clear()
    monkeypatch.setattr(opt, "Emitter", Broken)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OptimizerFallback)
        gm, report = optimize(model, (x,))
    assert report.fallback and "injected" in report.fallback and report.kept
    assert report.kernels_after == report.kernels_before == searched.kernels_before
    assert dict(report.costs) == {m: (b, b) for m, (b, _) in searched.costs.items()}
    assert "left the graph unchanged" in report.summary()


def test_one_tensor_is_the_one_argument():
    """``optimize(model, x)``: the tensor's rows were taken for the arguments (``TypeError: too
    many positional arguments`` from deep inside Dynamo's export)."""
    model, x = Fn(lambda x: torch.cat(torch.split(x, 2, 1), 1).relu()), torch.randn(3, 4)
    gm, report = optimize(model, x)
    assert report.kernels_after < report.kernels_before
    torch.testing.assert_close(gm(x), model(x))


def test_strict_raises(monkeypatch):
    import optimus_egg.pipeline as opt

    monkeypatch.setattr(opt, "translate", lambda gm: (_ for _ in ()).throw(ValueError("injected")))
    with pytest.raises(ValueError, match="injected"):
        optimize(Fn(lambda x: x + 1), (torch.randn(2),), strict=True)


def test_unknown_option_and_family_are_clear_errors():
    with pytest.raises(TypeError, match="valid"):
        optimize(Fn(lambda x: x + 1), (torch.randn(2),), budgt=3)
    with pytest.raises(ValueError, match="split_cat"):
        optimize(Fn(lambda x: x + 1), (torch.randn(2),), families=["nope"])



@pytest.mark.parametrize("options", [{"max_iterations": "5"}, {"max_enodes": -1}, {"max_iterations": 1.5},
                                     {"max_seconds": float("nan")}, {"max_seconds": "1"}, {"ilp_seconds": -1.0},
                                     {"strict": "false"}, {"rewrite_backward": 0},
                                     {"rewrite_backward": "on"}, {"verify": "yes"}, {"families": [1]}])
def test_bad_option_values_are_clear_errors(options):
    """A string budget once failed inside every compile (each graph falling back with a warning
    of its own), and ``strict="false"`` turned strict mode on."""
    with pytest.raises(ValueError, match="option"):
        Options.from_kwargs(**options)


def test_a_rule_file_may_be_a_path(tmp_path):
    rules = tmp_path / "rules.py"
    rules.write_text("RULES = []\n")
    assert Options.from_kwargs(families=rules).families == (str(rules),)


def test_a_rule_module_egglog_rejects_is_an_option_error(tmp_path):
    """It fell back inside every compile, each graph with egglog's message about a line of a
    generated program; rule names clashing across families likewise (ValueError, or through
    the backward pass, a crash of torch.compile)."""
    bad = tmp_path / "typo_rules.py"
    bad.write_text("from optimus_egg.rewrites import Rule\nRULES = [Rule('typo', '(Unary f (Unary g x)', 'x')]\n")
    with pytest.raises(ValueError, match="rule 'typo' of family '.*typo_rules.py' is not valid egglog"):
        optimize(Fn(lambda x: x + 1), (torch.randn(2),), families=["split_cat", str(bad)])
    clash = tmp_path / "clash_rules.py"
    clash.write_text("from optimus_egg.rewrites import Rule\nRULES = [Rule('slice-full', '(Unary f x)', '(Unary f x)')]\n")
    with pytest.raises(ValueError, match="rule names must be unique.*slice-full"):
        Options.from_kwargs(families=["split_cat", str(clash)])


def test_the_optimized_graph_refuses_inputs_it_was_not_optimized_for():
    """Capture traces sizes into constants and bakes in non-tensor arguments: called with
    another batch size, the graph returned ``reshape(x, 2, -1)`` of an 8-row input ([2, 32]
    where the model gives [4, 16]); with another ``n`` it multiplied by the example's."""
    model = Fn(lambda x, n: torch.cat([p.relu() for p in x.split(2, 1)], 1).reshape(x.shape[0] // 2, -1) * n)
    x = torch.randn(4, 8)
    gm, _ = optimize(model, (x, 3))
    y = torch.randn(4, 8)
    torch.testing.assert_close(gm(y, 3), model(y, 3))
    twice = copy.deepcopy(copy.deepcopy(gm))  # a GraphModule's deepcopy drops forward hooks
    torch.testing.assert_close(twice(y, 3), model(y, 3))
    for args in ((torch.randn(8, 8), 3), (x, 4), (x, 3.0), (x.double(), 3), (x,)):
        for f in (gm, twice):
            with pytest.raises(ValueError, match="optimize it again"):
                f(*args)


def test_a_graph_optimized_without_gradients_can_be_differentiated():
    """Without gradients, ``x[:, :2] / b[:, :2]`` became ``(x / b)[:, :2]`` (it divides beyond
    the slice, where nothing reads it); differentiated later, ``x``'s gradient there was ``0 / 0``
    where ``b`` is 0: NaN, where eager's is 0. A division stays on its slices either way."""
    def fn(x, y, mask):
        b = y * mask
        return torch.cat([x[:, 4:] / b[:, 4:], x[:, :2] / b[:, :2]], 1)

    x, y, mask = torch.randn(4, 8), torch.randn(4, 8), torch.ones(4, 8)
    mask[:, 2:4] = 0  # b is 0 only where the program never divides
    gm, report = optimize(Fn(fn), (x, y, mask))
    grads = []
    for f in (Fn(fn), gm):
        a = x.clone().requires_grad_()
        f(a, y, mask).sum().backward()
        grads.append(a.grad)
    torch.testing.assert_close(grads[1], grads[0])


def test_families_select_rules():
    model = Fn(lambda x: torch.cat([p.relu() for p in torch.split(x, 2, 1)], 1))
    x = torch.randn(2, 8)
    _, only_split = optimize(model, (x,), families=["split_cat"])
    _, both = optimize(model, (x,))
    assert both.kernels_after < only_split.kernels_after
    assert not any(r.startswith("unary") for r in only_split.rules_fired)


def test_output_that_becomes_an_input_is_copied():
    model = Fn(lambda x: torch.cat(torch.split(x, 2, 1), 1))
    x = torch.randn(2, 4)
    gm, _ = optimize(model, (x,))
    out = gm(x)
    assert out.data_ptr() != x.data_ptr()
    torch.testing.assert_close(out, x)


def test_traced_graph_module_reading_parameters_is_optimized():
    # Found by the fuzzer: capture's FakeTensorProp rejected the real tensors get_attr nodes read.
    class Halves(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(3, 4))

        def forward(self, x):
            return torch.cat([F.linear(x[:2], self.weight), F.linear(x[2:], self.weight)], 0)

    model = Halves()
    gm = torch.fx.symbolic_trace(model)
    assert any(n.op == "get_attr" for n in gm.graph.nodes)
    x = torch.randn(4, 4)
    new, report = optimize(gm, (x,))
    assert report.fallback is None
    torch.testing.assert_close(new(x), model(x))


def test_public_api():
    assert callable(optimus_egg.optimize) and callable(optimus_egg.optimize_graph)


def test_a_graph_with_nothing_cheaper_is_returned_as_it_was():
    x = torch.randn(4, 6)
    gm0 = capture(Fn(lambda x: torch.cat([x[:, :3].relu(), x[:, 3:].exp()], 1)), (x,))
    gm, report = optimize_graph(gm0, Options())
    assert report.kept and gm is gm0 and report.kernels_after == report.kernels_before
    gm1 = capture(Fn(lambda x: torch.cat([p.relu() for p in x.split(3, 1)], 1)), (x,))
    gm, report = optimize_graph(gm1, Options())
    assert not report.kept and gm is not gm1 and report.kernels_after < report.kernels_before


@pytest.mark.parametrize("cost_model", ["eager", "inductor"])
def test_pieces_glued_back_and_returned_are_one_copy_of_the_input(cost_model):
    """The copy of the output ties with the cat under eager launches and reads one tensor
    where the cat reads six: taken under either model."""
    x = torch.randn(4, 12)
    gm, report = optimize(Fn(lambda x: torch.cat(torch.split(x, 2, 1), 1)), (x,), cost_model=cost_model)
    assert not report.kept and report.cat_inputs == (6, 0)
    assert torch.equal(gm(x), x) and gm(x).data_ptr() != x.data_ptr()


def test_outputs_that_would_share_one_tensor_count_the_copies_that_keep_them_apart():
    # relu(x)[:, :4] and relu(x)[:, 4:] are one relu, but two outputs of their own: one of them
    # copied out makes two kernels again, so the graph stays as written
    x = torch.randn(3, 8)
    gm0 = capture(Fn(lambda x: (torch.relu(x[:, :4]), torch.relu(x[:, 4:]))), (x,))
    gm, report = optimize_graph(gm0, Options())
    assert gm is gm0 and report.rules_fired["unary-out-of-slice"] == 2
    assert report.kept_reason == "the outputs would need copies" and report.kernels_after == report.kernels_before


def test_as_many_kernels_reading_fewer_cat_inputs_is_taken():
    """One cat either way (the eager model sees no difference), but CPU Inductor copies each
    cat input with a loop of its own: the rewrite that glues pieces back whole is taken."""
    x = torch.randn(4, 12)
    gm0 = capture(Fn(lambda x: torch.cat([torch.tanh(x[:, :2]), *x.split(2, 1)], 1)), (x,))
    gm, report = optimize_graph(gm0, Options(cost_model="eager"))
    assert report.kernels_after == report.kernels_before and report.cat_inputs == (7, 2)
    assert not report.kept and torch.equal(gm(x), gm0(x))
    # with gradients too: the backward writes the gradient of one piece of x (the slice the
    # tanh reads) where it wrote seven (:func:`optimus_egg.bounds.grad_pieces`)
    xg = torch.randn(4, 12, requires_grad=True)
    gm1 = capture(Fn(lambda x: torch.cat([torch.tanh(x[:, :2]), *x.split(2, 1)], 1)), (xg,))
    gm, report = optimize_graph(gm1, Options(cost_model="eager"))
    assert not report.kept and torch.equal(gm(xg), gm1(xg))
    grads = [torch.autograd.grad(g(xg).sum(), xg)[0] for g in (gm, gm1)]
    torch.testing.assert_close(*grads)
    assert eager_launches(lambda: gm(xg).sum().backward()) < eager_launches(lambda: gm1(xg).sum().backward())


def test_an_input_whose_every_use_is_optimized_away_keeps_its_zero_gradient():
    """``b`` in ``cat([a, b])[:, :3]`` has no use left after the rewrite: AOTAutograd would give it
    a None gradient where eager autograd gives zeros (found by the fuzzer). Training keeps the
    original graph; without gradients the same graph is still optimized."""
    def f(a, b):
        return torch.cat([a, b], 1)[:, :3] * 2

    a, b = torch.randn(4, 3), torch.randn(4, 5)
    torch._dynamo.reset()
    REPORTS.clear()
    compiled = torch.compile(f, backend="optimus_egg", fullgraph=True)
    grads = []
    for fn in (f, compiled):
        args = [a.clone().requires_grad_(), b.clone().requires_grad_()]
        fn(*args).sum().backward()
        grads.append([x.grad for x in args])
    (eager_a, eager_b), (got_a, got_b) = grads
    assert got_b is not None, "the unused input lost its gradient"
    torch.testing.assert_close(got_b, eager_b)
    torch.testing.assert_close(got_a, eager_a)
    assert REPORTS[-1].kept and REPORTS[-1].kept_reason
    gm, report = optimize(Fn(f), (a, b))
    assert not report.kept and report.kernels_after < report.kernels_before
    torch.testing.assert_close(gm(a, b), f(a, b))


def test_other_cost_models_are_figured_when_read(monkeypatch):
    """A compile runs only the chosen cost model; another's figures come on the first read of
    ``report.costs`` (once), equal to what a compile under that model reports for the graph as
    written, and a cache hit reports the same figures."""
    from optimus_egg import cache
    from optimus_egg.extract.inductor import InductorCost

    calls = []
    total = InductorCost.total
    monkeypatch.setattr(InductorCost, "total", lambda self, dag: calls.append(dag) or total(self, dag))
    model, inputs = chain(6)()
    cache.clear()
    _, report = optimize(model, inputs, cost_model="eager")
    assert report.cost_model == "eager" and not calls
    assert set(report.costs) == {"eager", "inductor", "memory"}  # listing them runs nothing
    assert not calls
    figures = report.costs["inductor"]
    assert len(calls) == 2 and report.costs["inductor"] == figures and len(calls) == 2
    _, under_inductor = optimize(model, inputs, cost_model="inductor")
    assert figures[0] == under_inductor.kernels_before
    _, again = optimize(model, inputs, cost_model="eager")
    assert again.cache_hit and dict(again.costs) == dict(report.costs)


def test_an_output_is_laid_out_as_eager_lays_it_out():
    """cat of the relu'd pieces of a transposed x is contiguous, relu(x) is not: the output is
    copied contiguous (a caller's out.view(-1) raised), or, where eager's layout is not
    contiguous either, the graph is kept."""
    x = torch.randn(6, 4).t()
    for fn, kept in ((lambda x: torch.cat([p.relu() for p in x.split(2, 1)], 1), False),
                     (lambda x: torch.cat([p.relu() for p in x.split(2, 1)], 1).t(), True)):
        gm, report = optimize(Fn(fn), (x,))
        assert report.kept == kept and (kept or report.kernels_after < report.kernels_before)
        got, want = gm(x), fn(x)
        torch.testing.assert_close(got, want)
        assert got.stride() == want.stride()


def test_pieces_of_a_split_returned_as_they_are_keep_eagers_layout():
    """Found by the fuzzer (seed 63): the pieces of a split returned as one output (a tuple) were
    not compared, and the linear they split, fused with its neighbour, became a slice of the wider
    result: strides (4, 2, 1) where eager's are (2, 1, 1). The graph is kept."""
    from tests.fuzz.check import check_program
    from tests.fuzz.programs import Program

    src = ("def forward(self, x0, x1):\n    v0 = torch.relu(x1)\n    v1 = F.linear(v0, self.w0, self.w1)\n"
           "    v2 = F.linear(v0, self.w2, self.w3)\n    v3 = torch.cat([v1, v2], -1)\n"
           "    v4 = torch.split(v3, 1, 0)\n    v7 = torch.cat([torch.relu(v4[-1])], 0)\n"
           "    return (v7, torch.split(v2, 1, 0))\n")
    params = {"w0": torch.randn(1, 1), "w1": torch.randn(1), "w2": torch.randn(1, 1), "w3": torch.randn(1)}
    gm = check_program(Program(src, (torch.randn(1), torch.randn(1, 2, 1)), params))  # compares strides
    assert not any(n.target is torch.narrow for n in gm.graph.nodes)


def test_an_output_copied_for_its_layout_keeps_the_views_of_it_returned_with_it():
    """``v11 = cat([v9])`` is the column ``v9`` of another cat, laid out otherwise than eager's
    fresh ``v11``, so it is copied; the pieces of ``split(v11)``, returned as the split's tuple
    beside it (an FX graph's output holds the tuple), were pieces of the column, not of the
    copy, and aliased nothing of output 0 (fuzzer, seed 505). The graph is kept."""
    from tests.fuzz.check import check_program
    from tests.fuzz.programs import Program

    src = ("def forward(self, x0, x1):\n    v0 = x0[..., :]\n    v1 = v0.narrow(0, 0, 2) + v0.narrow(0, 0, 2)\n"
           "    v2 = torch.cat([v1], 0)\n    v5 = v2[..., :]\n    v6 = torch.relu(v5)\n    v7 = torch.cat([x1, v6], 1)\n"
           "    v8 = torch.split(v7, 1, 1)\n    v9 = v8[-2]\n    v11 = torch.cat([v9], 0)\n"
           "    v12 = torch.split(v11, 1, 0)\n    return (v11, v12,)\n")
    check_program(Program(src, (torch.randn(2, 2, 1, 1), torch.randn(2, 1, 1, 1))))


def test_output_sizes_equal_under_the_guards_pass_the_output_check():
    """Found by the fuzzer (seed 1818, backend flavour): recompiled with a dynamic batch, Dynamo
    wrote ``stack([p])`` of a ``[s//2, 1]`` piece as ``[s//2, 1, 1]``, equal to ``[1, s//2, 1]``
    only under its guard ``s//2 < 2``; the output check compared the sizes as written and the
    optimizer refused the graph (strict: raised)."""
    def fn(x, w, b):
        piece = torch.unbind(torch.nn.functional.linear(torch.tensor_split(x, 2, 0)[1], w, b), -2)[0]
        return torch.stack([piece], 0)

    graphs = []

    def grab(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    w, b = torch.randn(1, 9), torch.randn(1)
    compiled = torch.compile(fn, backend=grab, fullgraph=True)
    for n in (4, 2):  # the second call recompiles with a symbolic batch
        compiled(torch.randn(n, 2, 9), w, b)
    gm = graphs[-1]
    new, report = optimize_graph(gm, Options(strict=True))
    assert report.fallback is None
    args = [p.meta["example_value"] for p in gm.graph.find_nodes(op="placeholder")]
    real = [2 if isinstance(a, torch.SymInt) else torch.randn(2, 2, 9) if a.dim() == 3 else w if a.dim() == 2 else b
            for a in args]
    torch.testing.assert_close(new(*real), gm(*real))


def test_a_graph_that_reads_the_layout_of_a_computed_tensor_is_kept():
    """``relu(x)`` for ``cat(relu(pieces of x))`` has the values, not the strides: an
    ``as_strided`` of it read other elements (found in review). An input's layout is the caller's."""
    x = torch.randn(6, 4).t()

    def f(x):
        return torch.cat([p.relu() for p in x.split(2, 1)], 1).as_strided((6, 4), (4, 1))

    gm, report = optimize(Fn(f), (x,))
    assert report.kept and "reads the memory layout" in report.kept_reason
    assert torch.equal(gm(x), f(x))
    _, report = optimize(Fn(lambda x: torch.cat([p.relu() for p in x.split(2, 1)], 1) + x.as_strided((4, 6), (1, 4))), (x,))
    assert not report.kept


def test_a_graph_that_switches_grad_mode_refuses_another_mode():
    """Capture writes a ``no_grad`` region as ``_set_grad_enabled(False)`` ... ``(True)``: called
    under the caller's ``no_grad``, it turned grad mode back on for the rest of the caller's block,
    and its output required grad (found in review)."""

    def f(x):
        with torch.no_grad():
            c = x * 2
        return c + torch.cat([p.relu() for p in x.split(4, 1)], 1)

    x = torch.randn(4, 8, requires_grad=True)
    gm, _ = optimize(Fn(f), (x,))
    assert torch.equal(gm(x), f(x)) and torch.is_grad_enabled()
    with torch.no_grad():
        if any(effects.switches_mode(n) for n in gm.graph.nodes):  # (as torch 2.13 to 2.15 capture it)
            with pytest.raises(ValueError, match="switches grad mode"):
                gm(x)
        else:
            assert not gm(x).requires_grad
        assert not torch.is_grad_enabled()
    with torch.no_grad():
        gm_off, _ = optimize(Fn(f), (x,))
        assert not gm_off(x).requires_grad and not torch.is_grad_enabled()
    plain, _ = optimize(Fn(lambda x: torch.cat([p.relu() for p in x.split(4, 1)], 1)), (x,))
    with torch.no_grad():
        assert not plain(x).requires_grad  # a graph that switches nothing follows the caller's mode


@pytest.mark.parametrize("grad", [False, True])
def test_pieces_glued_back_into_an_output_become_one_copy_of_the_input(grad):
    """``cat(split(x))`` returned: the answer is ``x``, but eager returns a fresh tensor, so one
    copy. As many kernels as the cat, reading one tensor where the cat reads every piece."""
    model = Fn(lambda x: (torch.cat(torch.split(x, 2, 1), 1), torch.stack(torch.unbind(x, 0), 0)))
    x = torch.randn(4, 8, requires_grad=grad)
    gm, report = optimize(model, (x,))
    assert not report.kept and report.cat_inputs == (8, 0)
    outs = gm(x)
    for out in outs:
        torch.testing.assert_close(out, x, rtol=0, atol=0)
        assert out.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    if grad:
        sum(o.sum() for o in outs).backward()
        torch.testing.assert_close(x.grad, torch.full_like(x, 2.0))


def test_pieces_glued_back_with_nothing_saved_stay_as_written():
    """Must not fire: the same number of kernels and as many cat inputs is no gain."""
    model = Fn(lambda x: torch.cat([x[:, 2:], x[:, :2]], 1))  # a rotation: no piece is in place
    gm, report = optimize(model, (torch.randn(4, 8),))
    assert report.kept
