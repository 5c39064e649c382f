"""The side-by-side table: figures per backend, Optimus's verdict, and where optimus_egg is above."""

from optimus_egg.bench.steps import Row
from optimus_egg.bench.report import markdown, side_by_side


def _row(backend, eager_launches, launches, kernels, equal=True, error=None, passes=None):
    row = Row("family_split_cat", "inference", backend, eager_launches=eager_launches, launches=launches,
              kernels=kernels, equal=None if error else equal, error=error)
    if passes is not None:
        row.details["optimus_passes"] = passes
    return row.__dict__


def _results(*rows):
    meta = {"command": "optimus-egg bench", "date": "today", "machine": {
        "name": "cpu", "device": "cpu", "platform": "linux", "python": "3", "torch": "2", "threads": 1},
        "wall_s": 60.0, "cpu_s": 60.0, "reps": 1, "caches": "fresh",
        "backends": ["eager", "inductor", "inductor+optimus", "optimus_egg"]}
    return {"meta": meta, "rows": list(rows)}


def _cells(table):
    return [c.strip() for c in table.splitlines()[2].strip("|").split("|")]


def test_flags_where_optimus_egg_is_above_and_where_optimus_is_wrong():
    table = side_by_side(_results(
        _row("eager", 6, None, None), _row("inductor", 6, 3, 10),
        _row("inductor+optimus", 5, 3, 3, equal=False, passes={"split_cat_pass": 1}),
        _row("optimus_egg", 5, 4, 3)))
    cells = _cells(table)
    assert cells[2:5] == ["6 / 6 / 5 / 5", "3 / 3 / 4", "10 / 3 / 3"]
    assert cells[5:8] == ["split_cat_pass", "**WRONG**", "yes"]
    assert cells[8] == "**launches/step > inductor; launches/step > Optimus**"


def test_a_failed_optimus_compile_is_reported_not_compared():
    results = _results(_row("inductor", 6, 3, 10), _row("inductor+optimus", 6, None, None, error="KeyError: 'x'"),
                       _row("optimus_egg", 5, 3, 9))
    cells = _cells(side_by_side(results))
    assert cells[5:9] == ["-", "**fails** (KeyError)", "yes", "-"]
    assert "### Side by side" in markdown(results)


def test_an_output_optimus_returns_as_an_input_alias_counts_one_copy():
    optimus = _row("inductor+optimus", 0, 0, 0, passes={"split_cat_pass": 1})
    optimus["details"]["aliased_outputs"] = 2
    results = _results(_row("inductor", 3, 1, 8), optimus, _row("optimus_egg", 2, 1, 2))
    assert _cells(side_by_side(results))[8] == "-"
    optimus["details"]["aliased_outputs"] = 1
    assert _cells(side_by_side(results))[8] == "**eager launches > Optimus; kernel objects > Optimus**"
