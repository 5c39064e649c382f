"""``optimus-egg tune``: measure, fit, save a profile that ``optimize`` loads; bad profiles fail clearly."""

import json
import re

import pytest
import torch
import torch.nn.functional as F

from optimus_egg import optimize
from optimus_egg.cli import main
from optimus_egg import tune
from optimus_egg.extract.cost import CATEGORIES
from optimus_egg.extract.profile import Profile, load_profile
from tests.helpers import Fn

W = torch.randn(8, 8)


def _model():
    return Fn(lambda x: torch.relu(F.linear(x, W))), (torch.randn(4, 8),)


def test_tune_writes_a_profile_that_changes_the_cost_weights(tmp_path):
    path = tmp_path / "profile.json"
    assert main(["tune", "--shapes", "4x8,8x16", "--repeats", "1", "--inner", "2", "--out", str(path)]) == 0
    profile = load_profile(path)
    assert profile.device == "cpu" and profile.shapes == [[4, 8], [8, 16]]
    assert set(profile.weights) == set(CATEGORIES) and profile.weights["pointwise"] == 1
    assert all(w > 0 for w in profile.weights.values())
    assert all(len(profile.seconds[c]) == 2 for c in CATEGORIES)

    model, inputs = _model()
    _, plain = optimize(model, inputs)
    _, tuned = optimize(model, inputs, cost_profile=str(path))
    assert plain.kernels_before == 2  # one linear, one relu
    assert tuned.kernels_before == pytest.approx(profile.weights["matmul"] + profile.weights["pointwise"])


def test_fit_is_relative_to_a_pointwise_launch():
    weights = tune.fit({"pointwise": [1.0, 2.0], "matmul": [4.0, 8.0], "reduction": [1.0, 8.0]})
    assert weights == {"pointwise": 1.0, "matmul": 4.0, "reduction": 2.0}


def test_model_shapes_come_from_the_graph():
    model, inputs = _model()
    assert tune.model_shapes(model, inputs)[0] == (4, 8)  # x, the linear and the relu; W is (8, 8)


@pytest.mark.parametrize("content, message", [
    (None, "does not exist"),
    ("{not json", "is not JSON"),
    (json.dumps({"version": 99, "weights": {"pointwise": 1}}), "version-1"),
    (json.dumps({"version": 1}), "no 'weights'"),
    (json.dumps({"version": 1, "weights": {"matmull": 2}}), "unknown categories"),
    (json.dumps({"version": 1, "weights": {"matmul": -1}}), "finite number >= 0"),
    (json.dumps({"version": 1, "weights": {"matmul": "fast"}}), "finite number >= 0"),
])
def test_bad_profiles_are_clear_errors(tmp_path, content, message):
    path = tmp_path / "profile.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ValueError, match=message):
        load_profile(path)
    model, inputs = _model()
    with pytest.raises(ValueError, match=message):
        optimize(model, inputs, cost_profile=str(path))


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="ROWSxCOLS"):
        tune.parse_shapes("64by64")
    with pytest.raises(ValueError, match="valid: cpu, cuda"):
        tune.tune([(2, 2)], device="tpu")
    with pytest.raises(SystemExit, match="unknown model"):
        main(["tune", "--model", "nope", "--out", "/dev/null"])


@pytest.mark.parametrize("args, message", [
    (["--shapes", "64by64"], "ROWSxCOLS"),
    (["--shapes", "8x8", "--out", "/no/such/dir/profile.json"], "no such directory"),
    (["--shapes", "8x8", "--device", "cuda"] if not torch.cuda.is_available() else ["--model", "nope"], "cuda|unknown"),
])
def test_bad_command_lines_are_one_line_errors_before_any_timing(capsys, tmp_path, monkeypatch, args, message):
    """Each was a traceback; a missing --out directory only after every op was timed."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(["tune", *args])
    assert re.search(message, str(exit_.value)) and str(exit_.value).startswith("optimus-egg tune: ")


def test_help_names_where_the_profile_goes_by_default(capsys):
    with pytest.raises(SystemExit):
        main(["tune", "--help"])
    assert re.search(r"--out OUT\s+where to write the profile \(JSON; default:\s+optimus_egg_profile\.json\)",
                     capsys.readouterr().out)


@pytest.mark.parametrize("flag", ["--repeats", "--inner"])
def test_repeats_and_inner_are_positive(capsys, flag):
    with pytest.raises(SystemExit):
        main(["tune", flag, "0", "--shapes", "8x8"])
    assert "positive integer" in capsys.readouterr().err


def test_a_profile_tuned_on_another_device_warns(tmp_path):
    """A CUDA profile priced a CPU graph's kernels (and the reverse) without a word."""
    import warnings

    model, inputs = _model()
    for device in ("cpu", "cuda"):
        path = tmp_path / f"{device}.json"
        Profile(device, {"pointwise": 1.0, "matmul": 3.0}).save(path)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _, report = optimize(model, inputs, cost_profile=str(path))
        assert report.kernels_before == 4.0  # the weights are used either way
        said = [str(w.message) for w in caught if "tuned on" in str(w.message)]
        assert said == ([] if device == "cpu" else [f"optimus_egg: cost profile {str(path)!r} was tuned on cuda, "
                                                    "this graph runs on cpu: its weights are used as they are "
                                                    "(`optimus-egg tune` on this device fits its own)"])
