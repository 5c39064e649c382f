"""The calibration table compares each cost model with what Inductor really generated."""

from optimus_egg.bench import calibrate
from optimus_egg.bench.models import chain


def test_calibration_rows_measure_inductor_and_predict_it(capsys):
    rows = calibrate.calibrate({"chain2": chain(2)}, ["eager"])
    assert [r["graph"] for r in rows] == ["captured", "optimized (eager)"]
    captured, optimized = rows
    assert captured["eager launches"] == captured["eager model"]  # the chain has no multi-op calls
    assert optimized["kobj"] < captured["kobj"]
    for r in rows:  # split/relu/cat pieces and a linear: the Inductor model is exact here
        assert (r["pred kobj"], r["pred extern"]) == (r["kobj"], r["extern"])
    table = capsys.readouterr().out
    assert table.count("| chain2 |") == 2 and "error (inductor model)" in table


def test_models_include_the_zoo_and_chains_by_name():
    names = calibrate.models()
    assert {"rec_demo", "chain12"} <= set(names)
    assert set(calibrate.models(["chain5"])) == {"chain5"}
