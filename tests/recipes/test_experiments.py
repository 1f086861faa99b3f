import json
import os

import numpy as np
import pytest

from keras_tfm.data import digits
from recipes import experiments
from tests.helpers import END, MAX_DIGITS, START

VARIANTS = {
    "position": 6,  # 3 encodings x 2 tasks
    "scaling": 4,
    "heads": 3,
    "norm": 6,
    "combine": 2,
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_quick_variant_runs_and_writes_its_table(name, tmp_path, capsys):
    results = experiments.main([name, "--quick", "--output-dir", str(tmp_path)])
    rows = results[name]
    assert len(rows) == VARIANTS[name] and len({(r["task"], r["variant"]) for r in rows}) == len(rows)
    for row in rows:
        value = row.get("exact_match", row.get("accuracy"))
        assert 0.0 <= value <= 1.0 and len(row["curve"]) == 1
    table = (tmp_path / f"{name}.md").read_text()
    assert table.count("\n| ") == len(rows) + 1  # header + one line per run
    assert all(row["variant"] in table for row in rows) and table.split("\n", 2)[2] in capsys.readouterr().out
    assert json.loads((tmp_path / f"{name}.json").read_text())["rows"] == rows
    assert os.path.getsize(tmp_path / f"{name}.png") > 0
    if name == "scaling":  # unscaled logits start with more peaked attention, more so for bigger heads
        peak = {row["variant"]: row["init_max_weight"] for row in rows}
        assert peak["d_k=128, scale none"] > peak["d_k=16, scale none"] > peak["d_k=16, scale 1/√d_k"]


def test_order_task_differs_only_in_where_a_and_b_are():
    ids, labels = experiments.make_order_task(500, seed=3)
    assert ids.shape == (500, 16) and 0.4 < labels.mean() < 0.6
    for row, label in zip(ids, labels):
        assert (row == 1).sum() == 1 and (row == 2).sum() == 1
        assert label == int(np.argmax(row == 1) < np.argmax(row == 2))


@pytest.mark.xdist_group("trained_reverser")
def test_teacher_forced_exact_match_equals_greedy_generation(trained_reverser):
    # Half the targets are the reversal the model learned, half are sorted digits it was never taught.
    source, reverse_target = digits.make_dataset(100, MAX_DIGITS, "reverse", seed=7)
    _, sort_target = digits.make_dataset(100, MAX_DIGITS, "sort", seed=7)
    target = np.concatenate([reverse_target[:50], sort_target[50:]])
    generated = trained_reverser.generate(source, max_length=MAX_DIGITS + 1, start_id=START, end_id=END)
    per_row = np.all(generated == target[:, 1:], axis=1)
    assert 0.3 < per_row.mean() < 0.7  # some right, some wrong: the comparison means something
    assert experiments.greedy_exact_match(trained_reverser, source, target) == pytest.approx(per_row.mean())


def test_bad_experiment_name_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        experiments.main(["depth"])
    assert exit_info.value.code == 2 and "invalid choice" in capsys.readouterr().err
