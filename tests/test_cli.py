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
    assert cli.main(["rules", "examples/clamp_rules.py"]) == 0
    assert "clamp-idempotent" in capsys.readouterr().out
    assert cli.main(["rules", "no_such.module"]) == 2
    assert "unknown rule family" in capsys.readouterr().err


def test_rules_refuses_a_users_module_egglog_rejects_before_listing(capsys, tmp_path):
    """It was listed as if it would run (each compile then fell back); a module that failed to
    load was reported only after every built-in rule had been printed."""
    bad = tmp_path / "typo_rules.py"
    bad.write_text("from optimus_egg.rewrites import Rule\nRULES = [Rule('typo', '(Unary f (Unary g x)', 'x')]\n")
    assert cli.main(["rules", str(bad)]) == 2
    got = capsys.readouterr()
    assert "rule 'typo'" in got.err and "not valid egglog" in got.err and got.out == ""


def test_a_closed_pipe_ends_quietly():
    """``optimus-egg rules | head`` ended with a BrokenPipeError traceback."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "optimus_egg.cli", "rules"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before the first line is written
    err = proc.communicate(timeout=120)[1].decode()
    assert "Traceback" not in err and "BrokenPipeError" not in err
