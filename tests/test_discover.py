"""``optimus-egg discover``: enumeration, grouping by what a program computes, the e-graph's
verdict on a group, and the findings it writes."""

import json

import torch

from optimus_egg import cli, rewrites
from optimus_egg.discover import _canonical, _findings, check_batch, discover
from optimus_egg.discover_programs import Prog, copied, draws, enumerate_programs, signature, source
from optimus_egg.counting import eager_launches
from optimus_egg.egraph import Budget
from optimus_egg.outputs import visible_strides
from optimus_egg.rewrites import Rule, op_named

X = Prog("input", ("x",))


def split(x, sizes, dim):
    return Prog("split", (sizes, dim), (x,), 1, True)


def cat(pieces, order, dim):
    return Prog("cat", (order, dim), (pieces,), 2)


def _group_of(groups, text):
    return next(sig for sig, members in groups.members.items() if any(source(p) == text for p in members))


def test_groups_by_values_and_aliasing():
    groups = enumerate_programs((4, 6), ("x",), 2, 0, 10_000)
    alias = _group_of(groups, "return x")
    fresh = _group_of(groups, "v1 = torch.split(x, 2, 0); return torch.cat([v1[0], v1[1]], 0)")
    assert alias.values == fresh.values and alias.aliases and not fresh.aliases  # same values, apart
    assert _group_of(groups, "v1 = torch.chunk(x, 2, 0); return torch.cat([v1[0], v1[1]], 0)") == fresh
    assert _group_of(groups, "return x[1:4]") != _group_of(groups, "v1 = torch.split(x, 2, 0); "
                                                                   "return v1[1]")
    assert all(p.size <= 2 for members in groups.members.values() for p in members)


def test_groups_hold_only_what_is_equal_in_floating_point():
    """Reassociated or distributed sums and products are equal on the integer draws, not bit for
    bit on the float draw (rounding, overflow, subnormals): they must not make a group, or
    discover reports an equality no rule may adopt. Exact identities still do."""
    for shape in ((4, 6), (2, 3, 4)):
        env = draws(shape, ("x", "y"), 0)

        def sig(f):
            return signature([f(e["x"], e["y"]) for e in env], env)

        for a, b in [(lambda x, y: (x + x) + (y + y), lambda x, y: (x + y) + (x + y)),
                     (lambda x, y: x * x * y * y, lambda x, y: (x * y) * (x * y)),
                     (lambda x, y: x * (y + y), lambda x, y: x * y + x * y),
                     (lambda x, y: (x + y) + x, lambda x, y: (x + x) + y)]:
            assert sig(a) != sig(b)
        assert sig(lambda x, y: x * y) == sig(lambda x, y: y * x)
        assert sig(lambda x, y: torch.relu(torch.relu(x))) == sig(lambda x, y: torch.relu(x))


def test_the_egraph_proves_a_split_glued_back_whatever_the_sizes():
    fams = rewrites.families(["split_cat"])
    pair = [cat(split(X, 2, 0), (0, 1), 0), cat(split(X, (1, 3), 0), (0, 1), 0), copied(X)]
    reversed_ = cat(split(X, 2, 0), (1, 0), 0)
    (members, other), _ = check_batch([pair, [reversed_]], (4, 6), ("x",), fams, Budget(30, 50_000, 5.0))
    assert members[0].eclass == members[1].eclass == members[2].eclass  # x, copied: the same values
    assert other[0].eclass != members[0].eclass  # the halves swapped: other values
    assert members[0].eager == 1 and members[0].inductor >= 1


def test_a_member_whose_class_extracts_as_cheap_is_no_gain():
    """``cat([y, cat([x, x])])[:3]`` is ``y[:3]``, which its class holds (one copy out), and the
    group's cheapest member ``stack([x, y])[:, :3][1]`` (one stack) is another class: a rule that
    equates them gains nothing over what the optimizer already makes of the first."""
    x, y = X, Prog("input", ("y",))
    before = Prog("narrow", (0, 0, 3), (Prog("cat2", (0,), (y, Prog("cat2", (0,), (x, x), 1)), 2),), 3)
    after = Prog("select", (0, 1), (Prog("narrow", (1, 0, 3), (Prog("stack2", (0,), (x, y), 1),), 2),), 3)
    ((b, a),), _ = check_batch([[before, after]], (4, 6), ("x", "y"), rewrites.families(None),
                               Budget(30, 50_000, 5.0))
    assert b.eclass != a.eclass and (b.eager, a.eager) == (2, 1)  # unproven, dearer as written
    (finding,) = _findings([(b, a)], [], ("x", "y"))
    assert finding.eager_gain <= 0 < finding.launches_gain


def test_a_fresh_result_costs_a_kernel_the_models_do_not_see():
    """A flatten of a strided view copies, which the models price as a view: a fresh result is
    at least one kernel, as written and as its class extracts; a view stays free."""
    picked = Prog("select", (1, 1), (X,), 1)
    flat = Prog("flatten", (0, 1), (picked,), 2)
    ((copy,), (view,)), _ = check_batch([[flat], [picked]], (2, 3, 4), ("x",), rewrites.families(None),
                                        Budget(30, 50_000, 5.0))
    assert (copy.eager, copy.inductor, copy.extracted) == (1, 1, (1, 1))
    assert (view.eager, view.extracted[0]) == (0, 0)


def test_findings_are_equal_unproven_and_well_formed():
    summary, findings = discover([(4, 6)], ("x",), 2, ["split_cat", "pointwise"], batch=100)
    assert summary.programs > 100 and summary.groups < summary.programs
    assert summary.proven > 0 and summary.unproven >= len(findings) > 0
    gains = [min(f.eager_gain, f.launches_gain) for f in findings]
    assert gains == sorted(gains, reverse=True) and summary.forms == len(findings)
    for f in findings[:10]:
        x = torch.randn(4, 6)
        namespace = {"torch": torch}
        exec(f"def before(x):\n    {f.before.replace('; ', chr(10) + '    ')}\n"
             f"def after(x):\n    {f.after.replace('; ', chr(10) + '    ')}\n", namespace)
        assert torch.equal(namespace["before"](x), namespace["after"](x))
        rule = eval(f.rule.split("  # ")[0], {"Rule": Rule, "op_named": op_named})
        assert isinstance(rule, Rule)
    assert all(f.held_on for f in findings)  # the instance reported is one


def test_an_output_laid_out_otherwise_pays_the_copy_back():
    """The pipeline copies an output whose strides changed back into the program's layout, so a
    finding whose after form returns a transpose gains one launch less than eager measures."""
    summary, findings = discover([(4, 6)], ("x",), 2, ["split_cat", "pointwise"], batch=100)
    relaid = 0
    for f in findings:
        namespace = {"torch": torch}
        exec(f"def before(x):\n    {f.before.replace('; ', chr(10) + '    ')}\n"
             f"def after(x):\n    {f.after.replace('; ', chr(10) + '    ')}\n", namespace)
        x = torch.randn(4, 6)
        moved = visible_strides(namespace["before"](x)) != visible_strides(namespace["after"](x))
        launches = eager_launches(namespace["before"], x) - eager_launches(namespace["after"], x)
        assert f.launches_gain == launches - moved
        relaid += moved
    assert relaid > 0  # (the shape has such findings: the penalty is exercised)


def test_json_output(tmp_path, capsys):
    path = tmp_path / "found.json"
    assert cli.main(["discover", "--size", "1", "--shapes", "4x6", "--inputs", "1", "--json", str(path)]) == 0
    record = json.loads(path.read_text())
    assert set(record["summary"]) >= {"programs", "groups", "proven", "unproven", "profitable", "default_model",
                                      "seconds"}
    assert record["summary"]["default_model"] == sum(f["inductor_gain"] > 0 for f in record["findings"])
    assert all({"before", "after", "rule", "eager_gain", "held_on"} <= set(f) for f in record["findings"])
    assert capsys.readouterr().out.startswith(f"discover: {record['summary']['programs']} programs")


def test_findings_of_one_form_on_either_input_are_one():
    assert _canonical("relu(relu(y))", "relu(y)") == ("relu(relu(x))", "relu(x)")
    assert _canonical("add(y, x)", "add(x, y)") == ("add(x, y)", "add(y, x)")
