"""The side-by-side table: figures per backend, Optimus's verdict, and where optimus_egg is above."""

from optimus_egg.bench.steps import Row
from optimus_egg.bench.report import by_test_file, markdown, side_by_side


def _row(backend, eager_launches, launches, kernels, equal=True, error=None, passes=None, extern=None):
    row = Row("family_split_cat", "inference", backend, eager_launches=eager_launches, launches=launches,
              kernels=kernels, extern_calls=extern, equal=None if error else equal, error=error)
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
        _row("eager", 6, None, None), _row("inductor", 6, 3, 10, extern=2),
        _row("inductor+optimus", 5, 3, 3, equal=False, passes={"split_cat_pass": 1}, extern=1),
        _row("optimus_egg", 5, 4, 3, extern=2)))
    cells = _cells(table)
    assert cells[2:6] == ["6 / 6 / 5 / 5", "3 / 3 / 4", "10 / 3 / 3", "12 / 4 / 5"]
    assert cells[6:9] == ["split_cat_pass", "**WRONG**", "yes"]
    assert cells[9] == ("**launches/step > inductor; launches/step > Optimus; "
                        "kernel objects + extern > Optimus**")


def test_a_failed_optimus_compile_is_reported_not_compared():
    results = _results(_row("inductor", 6, 3, 10), _row("inductor+optimus", 6, None, None, error="KeyError: 'x'"),
                       _row("optimus_egg", 5, 3, 9))
    cells = _cells(side_by_side(results))
    assert cells[5] == "- / - / -"  # (no extern calls recorded: no figure)
    assert cells[6:10] == ["-", "**fails** (KeyError)", "yes", "-"]
    assert "### Side by side" in markdown(results)


def test_an_output_optimus_returns_as_an_input_alias_counts_one_copy():
    optimus = _row("inductor+optimus", 0, 0, 0, passes={"split_cat_pass": 1})
    optimus["details"]["aliased_outputs"] = 2
    results = _results(_row("inductor", 3, 1, 8), optimus, _row("optimus_egg", 2, 1, 2))
    assert _cells(side_by_side(results))[9] == "-"
    optimus["details"]["aliased_outputs"] = 1
    assert _cells(side_by_side(results))[9] == "**eager launches > Optimus; kernel objects > Optimus**"


def test_the_optimus_patterns_add_up_per_test_file_and_count_the_cases_above_a_peer():
    def row(model, backend, launches, kernels, aliased=0):
        r = _row(backend, 1, launches, kernels)
        r["model"] = model
        r["details"]["aliased_outputs"] = aliased
        return r

    results = _results(row("split_cat_a", "inductor", 1, 8), row("split_cat_a", "inductor+optimus", 0, 0, aliased=1),
                       row("split_cat_a", "optimus_egg", 1, 1),  # one copy: the floor
                       row("split_cat_b", "inductor", 1, 4), row("split_cat_b", "inductor+optimus", 1, 3),
                       row("split_cat_b", "optimus_egg", 1, 5),  # above both
                       row("family_split_cat", "optimus_egg", 1, 5))  # not a pattern
    lines = by_test_file(results).splitlines()
    assert len(lines) == 3
    assert [c.strip() for c in lines[2].strip("|").split("|")] == [
        "split/cat, inference", "2", "2 / 12", "1 / 3", "2 / 6", "1", "1", "0"]
    assert "### PyTorch's Optimus test patterns" in markdown(results)
