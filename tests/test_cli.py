"""The command line: ``rules`` lists every rule; ``demo`` runs the main job."""

from optimus_egg import cli
from optimus_egg.rewrites import all_family_names, family


def test_rules_lists_every_rule(capsys):
    assert cli.main(["rules"]) == 0
    out = capsys.readouterr().out
    for name in all_family_names():
        for rule in family(name).rules:
            assert rule.name in out


def test_demo_outputs_equal_eager(capsys):
    assert cli.main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "optimus_egg" in out and "NO" not in out.split("launches/step")[1]


def test_rules_lists_a_users_rule_module_too(capsys):
    assert cli.main(["rules", "examples/relu_rules.py"]) == 0
    assert "relu-idempotent" in capsys.readouterr().out
    assert cli.main(["rules", "no_such.module"]) == 2
    assert "unknown rule family" in capsys.readouterr().err
