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


def test_gpu_results_are_compared_with_the_cuda_prediction(tmp_path, capsys):
    import json

    rows = [{"model": "chain2", "mode": "inference", "backend": b, "launches": n, "triton_launches": t}
            for b, n, t in (("inductor", 20, 12), ("optimus_egg", 9, 4))]
    rows.append({"model": "chain2", "mode": "training", "backend": "inductor", "launches": 50, "triton_launches": 30})
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"meta": {}, "rows": rows}))
    got = calibrate.against_gpu(str(path), ["chain2"])
    assert [(r["graph"], r["triton"], r["extern"]) for r in got] == [("inductor", 12, 8), ("optimus_egg", 4, 5)]
    captured, optimized = got
    assert 0 < optimized["pred kernels"] <= captured["pred kernels"]  # CUDA fuses small cats: maybe equal
    assert captured["pred extern"] == optimized["pred extern"] > 0  # the chain's linears
    assert capsys.readouterr().out.count("| chain2 |") == 2
