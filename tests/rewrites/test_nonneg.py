"""``relu`` of a value that is never negative is that value: ``relu(relu(x)) → relu(x)``,
``relu(x * x) → x * x`` (rule ``relu-of-nonneg``, facts ``nonneg``); an idempotent op of a cat
takes itself off the pieces (``idempotent-of-cat``)."""

import pytest
import torch
import torch.nn.functional as F

from optimus_egg import optimize
from tests.helpers import EAGER, launches
from tests.helpers import check_rule as check

X = torch.randn(4, 6)
#: Values where relu's definition matters: NaN, both zeros, both infinities, underflow.
SPECIAL = torch.tensor([[float("nan"), -0.0, 0.0, float("inf"), float("-inf"), 1e-30],
                        [-1.0, 2.0, -3.0, 1e-20, -1e-20, 5.0]]).repeat(2, 1)  # X's shape


def _same(got: torch.Tensor, want: torch.Tensor) -> None:
    """Equal element for element, NaN where NaN, with the same sign of zero."""
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    if want.is_floating_point():
        number = ~torch.isnan(want)
        assert torch.equal(torch.signbit(got[number]), torch.signbit(want[number]))


def _fires(fn, x: torch.Tensor, fewer: int = 1):
    """The rule fires, ``fewer`` launches go, and the result is exactly eager's on random and
    special inputs, gradients included."""
    report, gm = check(fn, x)
    assert report.rules_fired.get("relu-of-nonneg", 0) > 0, report.summary()
    assert launches(gm, x) == launches(fn, x) - fewer
    if x.is_floating_point():
        special = SPECIAL.to(x.dtype)
        _same(gm(special), fn(special))
        for inp in (x, special):
            a, b = inp.clone().requires_grad_(), inp.clone().requires_grad_()
            fn(a).sum().backward()
            gm(b).sum().backward()
            _same(b.grad, a.grad)
    return gm


@pytest.mark.parametrize("fn", [
    lambda x: torch.relu(torch.relu(x)),
    lambda x: F.relu(x.relu()),
    lambda x: torch.relu(torch.sigmoid(x)),
    lambda x: torch.relu(torch.exp(x)),  # exp's key is marked as computing exactly ("exp!#1")
    lambda x: torch.relu(torch.abs(x)),
    lambda x: torch.relu(torch.softmax(x, 1)),
], ids=["relu", "relu-spellings", "sigmoid", "exp", "abs", "softmax"])
def test_relu_of_a_nonnegative_op_is_the_op(fn):
    _fires(fn, X)


@pytest.mark.parametrize("fn", [
    lambda x: torch.relu(x * x),
    lambda x: torch.relu(torch.square(x)),
    lambda x: torch.relu(torch.relu(x) * torch.sigmoid(x)),
], ids=["self-product", "square", "product-of-nonnegatives"])
def test_relu_of_a_product_of_nonnegatives_is_the_product(fn):
    """Exact in values; the gradients differ only where the product underflows to 0 (below
    |x| ~ 1e-23 in float32), which the special values stay above."""
    report, gm = check(fn, X)
    assert report.rules_fired["relu-of-nonneg"] > 0 and launches(gm, X) == launches(fn, X) - 1
    _same(gm(SPECIAL), fn(SPECIAL))


@pytest.mark.parametrize("fn, fewer", [
    (lambda x: torch.relu(torch.cat([torch.relu(x), torch.sigmoid(x)], 1)), 1),
    (lambda x: torch.relu(torch.stack([torch.exp(x), x * x], 2)), 1),
    (lambda x: torch.relu(torch.relu(x)[1:3]), 1),
    (lambda x: torch.relu(torch.relu(x).select(1, 2)), 0),  # the column of relu(x) is copied out
    (lambda x: torch.relu(torch.relu(x).t()), 1),
    (lambda x: torch.relu(torch.relu(x).permute(1, 0).reshape(-1)), 1),
    (lambda x: torch.relu(torch.relu(x).view(2, 12)), 1),
    (lambda x: torch.relu(torch.relu(x).unsqueeze(0).flatten(0, 1)), 1),
], ids=["cat", "stack", "narrow", "select", "transpose", "permute-reshape", "view", "unsqueeze-flatten"])
def test_through_views_slices_and_cats(fn, fewer):
    _fires(fn, X, fewer)


def test_relu_returned_beside_its_relu():
    """Two outputs of one value: still two tensors (relu, then a copy of it)."""
    fn = lambda x: (torch.relu(x), torch.relu(torch.relu(x)))  # noqa: E731
    report, gm = check(fn, X)
    assert report.rules_fired["relu-of-nonneg"] > 0 and launches(gm, X) == 2
    outs = gm(SPECIAL)
    assert outs[0].data_ptr() != outs[1].data_ptr()
    for got, want in zip(outs, fn(SPECIAL)):
        _same(got, want)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_floating_dtypes(dtype):
    x = torch.randn(4, 6, dtype=dtype)
    for fn in (lambda x: torch.relu(torch.relu(x)), lambda x: torch.relu(torch.sigmoid(x)),
               lambda x: torch.relu(torch.cat([torch.abs(x), torch.exp(x)], 0))):
        _fires(fn, x)


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int32, torch.int64])
def test_relu_is_idempotent_on_integers(dtype):
    x = torch.randint(-100 if dtype.is_signed else 0, 100, (4, 6), dtype=dtype)
    _fires(lambda x: torch.relu(torch.relu(x)), x)


def _kept(fn, x: torch.Tensor) -> None:
    report, gm = check(fn, x)
    assert "relu-of-nonneg" not in report.rules_fired and launches(gm, x) == launches(fn, x), report.summary()
    if x.is_floating_point() and x.shape == SPECIAL.shape:
        special = SPECIAL.to(x.dtype)
        torch.testing.assert_close(gm(special), fn(special), equal_nan=True)


@pytest.mark.parametrize("fn", [
    lambda x: torch.relu(torch.tanh(x)),
    lambda x: torch.relu(-torch.relu(x)),
    lambda x: torch.relu(x * x.flip(0)),  # a product of two tensors that may be negative
    lambda x: torch.relu(torch.relu(x) * x),
    lambda x: torch.relu(torch.relu(x) - 1),
    lambda x: torch.relu(torch.cat([torch.sigmoid(x), x], 1)),  # one piece may be negative
    lambda x: torch.relu(torch.log_softmax(x, 1)),
    lambda x: torch.relu(F.relu6(x) - 3),
], ids=["tanh", "neg", "x-times-y", "relu-times-x", "relu-minus-1", "cat-of-mixed", "log-softmax", "shifted"])
def test_a_value_that_may_be_negative_keeps_its_relu(fn):
    _kept(fn, X)


def test_reinterpreted_bits_keep_their_relu():
    """relu keeps -0.0, whose float32 bits read as int32 are its most negative value."""
    x = torch.tensor([[-0.0, 1.0], [-2.0, 3.0]])
    fn = lambda x: torch.relu(torch.relu(x).view(torch.int32))  # noqa: E731
    _kept(fn, x)
    gm, _ = optimize(fn, (x,), **EAGER)
    assert torch.equal(gm(x), fn(x)) and fn(x)[0, 0] == 0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_products_keep_their_relu(dtype):
    """A product that underflows to 0 passes no gradient through relu: in half precision that
    happens at |x| ~ 1e-4, where the product's own gradient is not negligible."""
    x = torch.randn(4, 6, dtype=dtype)
    _kept(lambda x: torch.relu(x * x), x)
    x = torch.full((3,), 1e-4, dtype=torch.float16, requires_grad=True)
    torch.relu(x * x).sum().backward()
    assert (x * x == 0).all() and (x.grad == 0).all()


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_integer_products_and_abs_keep_their_relu(dtype):
    """Integers wrap: ``x * x`` and ``abs`` of the most negative value are negative."""
    big = torch.tensor([[torch.iinfo(dtype).min, 3], [46341 if dtype == torch.int32 else 3037000500, -5]],
                       dtype=dtype)
    assert (big * big < 0).any() and (torch.abs(big) < 0).any()
    for fn in (lambda x: torch.relu(x * x), lambda x: torch.relu(torch.abs(x))):
        _kept(fn, big)
        gm, _ = optimize(fn, (big,), **EAGER)
        assert torch.equal(gm(big), fn(big))


#: The idempotent ops (rewrites.pointwise.IDEMPOTENT), by their torch functions.
IDEMPOTENT = [torch.relu, torch.abs, torch.sign, torch.floor, torch.ceil, torch.trunc]


@pytest.mark.parametrize("f", IDEMPOTENT, ids=lambda f: f.__name__)
@pytest.mark.parametrize("form", [
    lambda f, x, y: f(torch.cat([f(x), y], 0)),
    lambda f, x, y: f(torch.cat([y, f(x)], 1)),
    lambda f, x, y: f(torch.cat([f(x), y, f(y), x], 1)),  # two pieces to bare
    lambda f, x, y: f(torch.cat([f(x), x], 0)),
    lambda f, x, y: f(torch.stack([y, f(x)], 2)),
], ids=["cat-head", "cat-last", "two-of-four", "self", "stack"])
def test_an_idempotent_op_of_a_cat_takes_itself_off_the_pieces(f, form):
    """f(cat([f(x), y])) is f(cat([x, y])): exact in values (NaN, both zeros, infinities) and
    gradients."""
    fn = lambda x, y: form(f, x, y)  # noqa: E731
    y = torch.randn(4, 6)
    report, gm = check(fn, X, y)
    assert report.rules_fired.get("idempotent-of-cat", 0) > 0, report.summary()
    assert launches(gm, X, y) < launches(fn, X, y)
    _same(gm(SPECIAL, SPECIAL.flip(0)), fn(SPECIAL, SPECIAL.flip(0)))
    for a, b in ((X, y), (SPECIAL, SPECIAL.flip(1))):
        want = [a.clone().requires_grad_(), b.clone().requires_grad_()]
        got = [a.clone().requires_grad_(), b.clone().requires_grad_()]
        fn(*want).sum().backward()
        gm(*got).sum().backward()
        for g, w in zip(got, want):
            if w.grad is None:  # an input the form does not read
                assert g.grad is None
            else:
                _same(g.grad, w.grad)


@pytest.mark.parametrize("fn, x", [
    (lambda x, y: torch.relu(torch.cat([torch.abs(x), y])), X),  # another op's piece
    (lambda x, y: torch.abs(torch.cat([torch.relu(x), y])), X),
    (lambda x, y: torch.neg(torch.cat([torch.neg(x), y])), X),  # not idempotent
    (lambda x, y: torch.sigmoid(torch.cat([torch.sigmoid(x), y])), X),
    (lambda x, y: torch.relu(torch.cat([torch.relu(x) + 1, y])), X),  # no piece is a relu
    # a piece of another dtype than the cat (converted between the two abs): not proven, kept
    (lambda x, y: torch.abs(torch.cat([torch.abs(x), y])), torch.tensor([[-128, 3]] * 4, dtype=torch.int8)),
], ids=["relu-of-abs", "abs-of-relu", "neg", "sigmoid", "no-such-piece", "promoted"])
def test_no_piece_is_bared_by_another_op_or_across_a_promotion(fn, x):
    y = torch.randn(x.shape[0], 2)
    x = x if x.dtype != torch.float32 else x[:, :2]
    report, gm = check(fn, x, y)
    assert "idempotent-of-cat" not in report.rules_fired, report.summary()
    _same(gm(x, y), fn(x, y))
