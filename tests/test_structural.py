"""The structural ops (optimus_egg.structural): indexing, cats, reshapes and splits parsed into
the IR's terms and written back, ATen graphs' included."""

import torch

from optimus_egg.frontend import translate
from optimus_egg.pipeline import capture
from tests.helpers import Fn, check


def test_basic_indexing_forms():
    x = torch.randn(3, 4, 5)
    check(lambda x: x[..., 1:3] + x[:, None, 0, -2:].squeeze(1)[:, None].expand(3, 1, 2), x)
    check(lambda x: x[1] + x[-1, :, ::1], x)


def test_cat_leaves_out_pieces_empty_along_its_dim():
    # Found by the fuzzer: with the empty piece, cat(v1, v2) equals v1 and so contains itself;
    # cat-of-cat unrolled that into ever longer lists (20k e-nodes, 26 s over a 10 s budget).
    def fn(x):
        v1 = torch.div(x.narrow(0, 0, 1), x.narrow(0, 0, 1))
        v2 = torch.div(x.narrow(0, 1, 0), x.narrow(0, 1, 0))
        v4 = torch.cat([v1, v2], 0)
        return torch.cat([v4.narrow(0, 0, 1) + v4.narrow(0, 0, 1)], 0)

    x = torch.randn(1, 3, 2)
    report, _ = check(fn, x)
    assert report.stop_reason == "saturated" and report.enodes < 200, report.summary()
    cats = [t for t in translate(capture(Fn(fn), (x,))).origin if t.op == "Cat"]
    assert cats and all(t.args[0].args[1].op == "Nil" for t in cats)  # one piece each


def test_reshape_of_an_empty_tensor_stays_as_written():
    # Found by the fuzzer: unflatten(-2, (1, 7)) of a (7, 0, 7, 4) tensor also reads as splitting
    # dim 1 (0 = 0 * 1) into (0, 0 / 0); the size analysis then divided by zero (egglog panic).
    def fn(x):
        return x.narrow(1, 0, 0).unflatten(-2, (1, 7)) * 2

    x = torch.randn(7, 3, 7, 4)
    check(fn, x)
    assert not any(t.op in ("Flat", "Unflat") for t in translate(capture(Fn(fn), (x,))).origin)


def _aliases(t, *inputs):
    return any(t.untyped_storage().data_ptr() == x.untyped_storage().data_ptr() for x in inputs)


#: Reshapes that are neither one merge of two dims nor one split of a dim, from the shape before.
RESHAPES = [((2, 1, 6), (12,)), ((2, 3, 4), (-1,)), ((2, 3, 4), (3, 8)), ((6, 4), (2, 12)), ((2, 3, 4), (2, 1, 12)),
            ((1, 6, 1), (2, 3)), ((4, 6), (2, 2, 2, 3)), ((2, 3, 4), (1, 24, 1)), ((2, 2, 6), (4, 3, 2))]


def test_any_reshape_is_squeezes_flats_and_unflats_of_its_values():
    """A reshape that merges and splits several dims reads as views of its values, whether it
    copies (a strided input) or not: the values, shape and strides are eager's, and the result
    is fresh where eager's is (a copy) and a view of the input where eager's is."""
    views = {"Squeeze", "Unsqueeze", "Flat", "Unflat"}
    for shape, target in RESHAPES:
        for fn in (lambda x: x.reshape(target),  # a view
                   lambda x: x.transpose(0, -1).reshape(target),  # a copy of a transpose
                   lambda x: torch.cat([x, x], 0)[:x.shape[0]].reshape(target),  # x's values, fresh
                   lambda x: torch.cat([x, x], -1)[..., 1:x.shape[-1] + 1].reshape(target),  # a strided slice
                   lambda x: torch.relu(torch.cat([x, x], -1))[..., 1:x.shape[-1] + 1].reshape(target)):
            x = torch.randn(shape)
            tr = translate(capture(Fn(fn), (x,)))
            assert not [t for t in tr.origin if t.op == "Op" and "reshape" in tr.registry.calls[t.args[0]].name]
            _, gm = check(fn, x)
            for _ in range(2):
                x = torch.randn(shape)
                want, got = fn(x), gm(x)
                assert got.stride() == want.stride() and _aliases(got, x) == _aliases(want, x), (shape, target)
    assert any(t.op in views for t in tr.origin)


def test_a_reshape_to_no_dims_of_no_elements_or_of_bits_stays_as_written():
    """A scalar either side, no elements, and ``view(dtype)``: the bits read as another type,
    in the same shape or (another width) in another."""
    for fn, x, name in ((lambda x: x.reshape(()) * 2, torch.randn(1, 1), "reshape"),
                        (lambda x: x.reshape(1, 1) * 2, torch.randn(()), "reshape"),
                        (lambda x: x[:, :0].reshape(2, 0, 3) * 2, torch.randn(3, 4, 2), "reshape"),
                        (lambda x: x.view(torch.int32) * 2, torch.randn(2, 3, 4), "view"),
                        (lambda x: x.view(torch.int16) * 2, torch.randn(2, 3, 4), "view")):
        check(fn, x)
        tr = translate(capture(Fn(fn), (x,)))
        assert not any(t.op in ("Squeeze", "Unsqueeze", "Flat", "Unflat") for t in tr.origin)
        assert [tr.registry.calls[t.args[0]].name for t in tr.origin if t.op == "Op"] == [name]


def test_pieces_of_a_tensor_split_at_decreasing_indices_are_not_read_as_a_tiling():
    """x.tensor_split([4, 2], 1) is x[:, :4], x[:, 4:2] (empty), x[:, 2:]: the pieces overlap, so
    they are not consecutive slices (the last was read as x[:, 4:8] and the emission failed)."""
    fn = lambda x: (x.tensor_split([4, 2], 1)[2].sum(1), torch.cat([p.relu() for p in x.split(3, 1)], 1))  # noqa: E731
    report, _ = check(fn, torch.randn(4, 6))
    assert report.kernels_after < report.kernels_before


def _aten(fn, *inputs):
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(fn, tracing_mode="fake")(*inputs)


def test_aten_slices_are_slices_and_aten_ops_are_the_table_ops():
    gm = _aten(lambda x: (x[:, 2:5], x[1:], x[:, 3:100], x[:, -3:], torch.relu(x), torch.cat([x, x], 1)),
               torch.randn(4, 8))
    tr = translate(gm)
    assert [t.op for t in tr.outputs] == ["Sl", "Sl", "Sl", "Sl", "Unary", "Cat"]
    assert [t.args[1:] for t in tr.outputs if t.op == "Sl"] == [(1, 2, 3), (0, 1, 3), (1, 3, 5), (1, 5, 3)]
    stepped = _aten(lambda x: (x[:, ::2],), torch.randn(4, 8))
    assert translate(stepped).outputs[0].op == "Op"  # a step other than 1: kept as written
