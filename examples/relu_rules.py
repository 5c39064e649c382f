"""A rule module of your own: relu is idempotent, ``relu(relu(x)) → relu(x)``.

Pass it like a built-in family, by file path or (when importable) by module path::

    torch.compile(model, backend="optimus_egg",
                  options={"families": ["split_cat", "pointwise", "examples/relu_rules.py"]})
    optimus-egg explain examples/towers.py:towers --families split_cat pointwise examples/relu_rules.py

It fires on towers that end in a ReLU and are glued back and ReLU'd again: the built-in
``unary-out-of-cat`` pulls the towers' ReLU out of the cat, and this rule then drops one of the
two ReLUs. Each ``Unary`` carries a per-graph key (``relu#3``), so the rule names the op it is
about with :func:`optimus_egg.rewrites.op_named`; without that test it would also "simplify"
``tanh(tanh(x))``.
"""

from optimus_egg.rewrites import Rule, op_named

RULES = [
    Rule("relu-idempotent", "(Unary f (Unary g x))", "(Unary g x)",
         (op_named("f", "relu"), op_named("g", "relu"))),
]
