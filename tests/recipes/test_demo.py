import numpy as np

from recipes import demo


def test_generated_labels_say_whether_first_and_last_real_digits_match():
    ids, labels = demo.make_data(500, 9, seed=3)
    lengths = (ids != 0).sum(1)
    assert lengths.min() >= 3 and lengths.max() <= 9
    assert np.all(ids[np.arange(9)[None, :] >= lengths[:, None]] == 0)  # padding only after the real digits
    last = ids[np.arange(500), lengths - 1]
    np.testing.assert_array_equal(labels, (ids[:, 0] == last).astype("int32"))
    assert 0.4 < labels.mean() < 0.6


def test_demo_trains_and_reports(capsys):
    demo.main(["--epochs", "2", "--samples", "600", "--max-length", "6"])
    out = capsys.readouterr().out
    assert "training loss:" in out and "held-out accuracy" in out
