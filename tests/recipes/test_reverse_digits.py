import json
import os
import shlex
import signal
import subprocess
import sys
import time

import keras
import pytest

from keras_tfm.data import digits
from recipes import common, reverse_digits
from tests.helpers import epochs_in
from tests.recipes.saved_models import KeepModel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
@pytest.mark.every_backend
def test_quick_run_learns_writes_every_promised_file_and_is_never_overwritten(tmp_path, capsys, loads_without_recipes):
    keep = KeepModel()
    summary = reverse_digits.main(["--quick", "--output-dir", str(tmp_path)], extra_callbacks=[keep])
    loads_without_recipes(tmp_path / "model.keras", keep.trained)  # where only keras_tfm is installed
    for name in ("model.keras", "history.csv", "curves.png", "summary.json", "alignment.png",
                 "position_encoding.png", "decoder_self_attention.png"):
        assert os.path.getsize(tmp_path / name) > 0, name
    assert not (tmp_path / "checkpoint.keras").exists()  # removed once model.keras loaded back
    assert any(name.endswith("_alignment_0.png") for name in os.listdir(tmp_path / "attention"))
    explorer = tmp_path / "attention" / "attention.html"  # one page: before training and both epochs on its slider
    page = explorer.read_text()
    assert '"epochs":["0","1","2"]' in page and '"labels":["before training","epoch 1","epoch 2"]' in page
    assert f"(open in a browser): {explorer}" in capsys.readouterr().out
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["metrics"] == summary["metrics"]
    assert saved["flags"]["quick"] is True and saved["wall_time_seconds"] > 0
    assert epochs_in(tmp_path) == [0, 1]
    # It learned something: the loss fell, and the saved model loads and predicts the digits' vocabulary.
    history = common.read_history(str(tmp_path))
    assert history["loss"][1] < history["loss"][0] and history["val_loss"][1] < history["val_loss"][0]
    assert len(history["gradient_norm"]) == 2 and all(0 < n <= m for n, m in zip(history["gradient_norm"],
                                                                                  history["gradient_norm_max"]))
    model = keras.saving.load_model(tmp_path / "model.keras")
    source, target = digits.make_dataset(4, 6, "reverse", seed=5)
    assert model.predict((source, target[:, :-1]), verbose=0).shape == (4, target.shape[1] - 1, digits.VOCAB_SIZE)
    # The reported exact match is the saved model's greedy answers on the recipe's held-out strings (seed 0 + 1).
    x_test, y_test = digits.make_dataset(64, 6, "reverse", seed=1)
    greedy = model.generate(x_test, max_new_tokens=7, start_id=digits.START, end_id=digits.END)
    assert saved["metrics"]["exact_match_greedy"] == digits.exact_match(greedy, y_test)
    assert keras.utils.load_img(tmp_path / "curves.png").size[0] > 100  # a real picture

    # Run again into the finished folder: it says so and touches nothing.
    before = {name: os.path.getmtime(tmp_path / name) for name in ("model.keras", "summary.json", "history.csv")}
    with pytest.raises(SystemExit) as exit_info:
        reverse_digits.main(["--quick", "--output-dir", str(tmp_path)])
    assert exit_info.value.code == 0
    assert "holds a finished reverse_digits run" in capsys.readouterr().out
    assert {name: os.path.getmtime(tmp_path / name) for name in before} == before


# --no-jit: XLA's compile (about 6 s alone here, in each of two processes) is not what these tests check; the quick
# run above trains on the recipe's own fast path
SMALL = ["--train-samples", "256", "--test-samples", "16", "--max-digits", "4", "--batch-size", "32", "--no-jit",
         "--no-attention-maps"]


@pytest.mark.slow
def test_ctrl_c_stops_with_one_line_and_the_run_resumes_where_it_stopped(tmp_path, capsys):
    """A real SIGINT to a recipe process after its first epoch: one line, status 130, the epochs kept. A resume
    with another preset is refused; with the same flags (and fewer epochs) it continues, repeating nothing."""
    run = tmp_path / "run"
    argv = [*SMALL, "--epochs", "40", "--output-dir", str(run)]
    process = subprocess.Popen([sys.executable, "-m", "recipes.reverse_digits", *argv], cwd=ROOT, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while not (run / "history.csv").exists() or not epochs_in(run):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 130, err[-3000:]
    done = json.loads((run / "backup" / "training_metadata.json").read_text())["epoch"]
    assert 1 <= done < 40 and epochs_in(run) == list(range(done))  # every finished epoch logged, once
    resume = f"python -m recipes.reverse_digits {shlex.join(argv)}"
    assert err.strip().splitlines()[-1] == f"stopped after epoch {done} of 40; resume with: {resume}"
    assert "Traceback" not in err
    lines = out.splitlines()
    start = lines.index(f"run folder: {run}")  # after the backend, devices and fast-path lines
    assert start <= 3 and lines[start + 1] == f"  if it is stopped, resume it with: {resume}"

    with pytest.raises(SystemExit) as refused:
        reverse_digits.main([*argv, "--preset", "small"])
    assert refused.value.code == 2 and "--preset small differs from the run's --preset tiny" in capsys.readouterr().err

    summary = reverse_digits.main([*SMALL, "--epochs", str(done + 1), "--output-dir", str(run)])
    assert f"resuming from epoch {done + 1} of {done + 1}" in capsys.readouterr().out
    assert epochs_in(run) == list(range(done + 1))  # one more epoch, none repeated
    assert summary["recipe"] == "reverse_digits" and [s["from_epoch"] for s in summary["segments"]] == [0, done]
    assert summary["segments"][1]["flags"] == {"epochs": done + 1}
    assert not (run / "checkpoint.keras").exists() and not (run / "backup").exists()  # one model kept


@pytest.mark.slow
@pytest.mark.tensorflow_only
def test_mirrored_strategy_on_two_logical_cpus(tmp_path):
    script = (
        "import tensorflow as tf\n"
        "cpu = tf.config.list_physical_devices('CPU')[0]\n"
        "tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)\n"
        "from recipes import reverse_digits\n"
        f"reverse_digits.main(['--quick', '--no-attention-maps', '--distribute', 'mirrored', '--output-dir', {str(tmp_path)!r}])\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "training on 2 replicas (mirrored)" in result.stdout
    assert os.path.exists(tmp_path / "model.keras")


@pytest.mark.parametrize("flags", [["--epochs", "-1"], ["--task", "shuffle"], ["--preset", "huge"], ["--batch-size", "0"]])
def test_bad_flags_are_usage_errors(flags, capsys):
    with pytest.raises(SystemExit) as exit_info:
        reverse_digits.main(flags)
    assert exit_info.value.code == 2
    assert "error:" in capsys.readouterr().err
