"""A rule module of your own: a clamp applied twice is applied once, ``relu6(relu6(x)) → relu6(x)``.

Pass it like a built-in family, by file path or (when importable) by module path::

    torch.compile(model, backend="optimus_egg",
                  options={"families": ["split_cat", "pointwise", "examples/clamp_rules.py"]})
    optimus-egg explain examples/towers.py:towers --families split_cat pointwise examples/clamp_rules.py

It fires on towers that end in a ReLU6 and are glued back and ReLU6'd again: the built-in
``unary-out-of-cat`` pulls the towers' ReLU6 out of the cat, and this rule then drops one of the
two. Each ``Unary`` carries a per-graph key (``hardtanh#3``) that names one call, its bounds
included: ``f`` twice is the same clamp twice, and :func:`optimus_egg.rewrites.op_named` says which
ops the rule is about (without it, it would also "simplify" ``tanh(tanh(x))``). Exact: the second
clamp leaves every value the first one gives as it is (NaN too), and passes the gradient wherever
the first one does.
"""

from optimus_egg.rewrites import Rule, op_named

RULES = [
    Rule("clamp-idempotent", "(Unary f (Unary f x))", "(Unary f x)",
         (op_named("f", "clamp", "clip", "hardtanh", "relu6"),)),
]
