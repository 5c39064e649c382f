"""The wide benchmark: N towers side by side fuse into a form whose launches do not grow with N."""

import re

from optimus_egg.bench import wide as bench


def test_command_prints_launches_that_do_not_grow_with_the_width(capsys):
    bench.main(["4", "8", "--reps", "1"])
    found = re.findall(r"N=(\d+): eager launches (\d+) → (\d+);", capsys.readouterr().out)
    assert [(int(n), int(before)) for n, before, _ in found] == [(4, 2 * 4 + 1), (8, 2 * 8 + 1)]  # linear, relu; a cat
    after = {int(a) for *_, a in found}
    assert len(after) == 1 and after.pop() < 2 * 4 + 1


def test_every_shape_fuses_to_launches_that_do_not_grow_with_the_width(capsys):
    for shape in ("inputs", "sequence"):
        bench.main(["4", "8", "--reps", "1", "--shape", shape])
        found = re.findall(r"N=(\d+): eager launches (\d+) → (\d+);", capsys.readouterr().out)
        before = [int(b) for _, b, _ in found]
        after = {int(a) for *_, a in found}
        assert before[1] > before[0] and len(after) == 1 and after.pop() < before[0], (shape, found)
