import json
import os

import keras
import numpy as np
import pytest

from keras_tfm.data import digits
from keras_tfm.models import Seq2SeqTransformer
from recipes import experiments
from tests.helpers import END, MAX_DIGITS, START

VARIANTS = {
    "position": 6,  # 3 encodings x 2 tasks
    "scaling": 4,
    "heads": 3,
    "norm": 6,
    "warmup": 6,
    "combine": 8,  # 2 on reverse digits, 3 ways x 2 widths on the two-lookup task
    "softmax": 4,
    "clipping": 6,
    "norm_type": 3,
    "residual": 4,
    "decoding": 4,
    "heads_lookup": 3,
}


# CI runs one experiment end to end ("heads_lookup", with the two seeds --quick runs: training, the probe's own
# numbers, the mean and spread, the table, the JSON and the plot). The table and the mean ± sd logic are checked on
# a fake experiment in milliseconds, and each experiment's own measure (batch dependence, the initial attention
# peak, the repeat rate, the layers without softmax or residuals) on its own below. The other eleven change only
# the arguments of code tested there and in tests/models, and run with --run-large (89 test-seconds on 2 Zen 4
# cores, 2026-12-04; the six of them CI ran before took 41).
IN_CI = {"heads_lookup"}


@pytest.mark.slow
@pytest.mark.parametrize("name", [name if name in IN_CI else pytest.param(name, marks=pytest.mark.large)
                                  for name in sorted(VARIANTS)])
def test_quick_variant_runs_and_writes_its_table(name, tmp_path, capsys):
    seeds = 2 if name in IN_CI else 1
    results = experiments.main([name, "--quick", "--seeds", str(seeds), "--output-dir", str(tmp_path)])
    rows = results[name]
    assert len(rows) == VARIANTS[name] and len({(r["task"], r["variant"]) for r in rows}) == len(rows)
    for row in rows:
        assert len(row["curve"]) == 1 and row["seeds"] == list(range(seeds)) and len(row["runs"]) == seeds
    table = (tmp_path / f"{name}.md").read_text()
    assert table.count("\n| ") == len(rows) + 1  # header + one line per run
    assert all(row["variant"] in table for row in rows) and table.split("\n", 2)[2] in capsys.readouterr().out
    assert json.loads((tmp_path / f"{name}.json").read_text())["rows"] == rows
    assert os.path.getsize(tmp_path / f"{name}.png") > 0
    if name != "decoding":  # every training run logs its gradient norm, plotted below the curves
        assert all(np.isfinite(run["gradient_norm"][0]) and run["gradient_norm"][0] > 0
                   for row in rows for run in row["runs"])
    if name == "heads_lookup":  # one attention distance per head, each between 0 and the sequence length
        for row in rows:
            heads = int(row["variant"].split()[0])
            assert len(row["mean_attention_distance"]) == heads
            assert all(0.0 < d < 16 for d in row["mean_attention_distance"])
            assert row["accuracy"] == pytest.approx(np.mean([run["accuracy"] for run in row["runs"]]))
    # Each --run-large variant's own numbers, as its docs/experiments page reads them.
    if name == "norm_type":  # a LayerNorm model's sample ignores its batch mates; BatchNorm's does not, in training
        moved = {row["variant"]: row["batch_dependence_training"] for row in rows}
        assert moved["layer norm"] < 1e-5 and moved["none norm"] < 1e-5 and moved["batch norm"] > 1e-3
    if name == "decoding":
        assert len({row["reference_repeat_rate"] for row in rows}) == 1
    if name == "residual":  # one first-epoch gradient norm per block, each finite and positive
        for row in rows:
            depth = int(row["variant"].split()[0])
            assert len(row["block_gradient_norms"]) == depth and min(row["block_gradient_norms"]) > 0
        assert "first-epoch gradient norm per block" in table
    if name == "scaling":  # unscaled logits start with more peaked attention, more so for bigger heads
        peak = {row["variant"]: row["init_max_weight"] for row in rows}
        assert peak["d_k=128, scale none"] > peak["d_k=16, scale none"] > peak["d_k=16, scale 1/√d_k"]


def _fake_experiment(settings):
    """Two variants whose numbers depend on the seed in a known way."""
    seed = settings.seed
    return [{"task": "t", "variant": "a", "accuracy": 0.5 + 0.1 * seed, "final_loss": 1.0, "diverged": seed == 1,
             "curve": [0.2 * seed, 0.4], "gradient_norm": [1.0 + seed, 2.0], "seconds": 3.0},
            {"task": "t", "variant": "b", "accuracy": 0.9, "final_loss": float(seed), "diverged": False,
             "curve": [0.1, 0.3], "gradient_norm": [2.0, 2.0], "seconds": 4.0}]


def test_the_mean_spread_table_and_files_of_a_fake_experiment(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(experiments.EXPERIMENTS, "fake", _fake_experiment)
    monkeypatch.setattr(experiments, "EXPERIMENT_NAMES", (*experiments.EXPERIMENT_NAMES, "fake"))
    rows = experiments.main(["fake", "--seeds", "3", "--seed", "0", "--output-dir", str(tmp_path)])["fake"]
    a, b = rows
    assert a["seeds"] == [0, 1, 2] and len(a["runs"]) == 3 and a["runs"][1]["accuracy"] == pytest.approx(0.6)
    assert a["accuracy"] == pytest.approx(0.6) and a["accuracy_sd"] == pytest.approx(0.1)  # 0.5, 0.6, 0.7
    assert b["final_loss"] == pytest.approx(1.0) and b["final_loss_sd"] == pytest.approx(1.0)  # 0, 1, 2
    assert a["diverged"] is True and a["diverged_runs"] == 1 and b["diverged_runs"] == 0
    assert a["curve"] == pytest.approx([0.2, 0.4]) and a["first_gradient_norm"] == pytest.approx(2.0)
    assert a["last_gradient_norm"] == pytest.approx(2.0) and a["first_gradient_norm_sd"] == pytest.approx(1.0)
    table = (tmp_path / "fake.md").read_text()
    assert "| t | a | 0.600 ± 0.100 | 2.000 ± 1.000 | 2.000 ± 0.000 | diverged (1/3 seeds) | 3 |" in table
    assert "| t | b | 0.900 ± 0.000 | 2.000 ± 0.000 | 2.000 ± 0.000 | 1.000 ± 1.000 | 4 |" in table
    assert table.splitlines()[2] == "| task | variant | accuracy | first_gradient_norm | last_gradient_norm | " \
                                    "final_loss | seconds |"
    assert table.split("\n", 2)[2] in capsys.readouterr().out
    assert json.loads((tmp_path / "fake.json").read_text())["rows"] == rows
    assert os.path.getsize(tmp_path / "fake.png") > 0


def test_batch_dependence_tells_batch_norm_from_layer_norm():
    x, _ = experiments.make_order_task(16, seed=1)
    moved = {}
    for name in ("layer", "batch", "none"):
        keras.utils.set_random_seed(0)
        model = experiments.encoder_classifier(experiments.EncoderBlockWithNorm, depth=2, normalization=name)
        moved[name] = experiments.batch_dependence(model, x)
    for name in ("layer", "none"):  # each token normalised alone (or not at all): its batch mates do not matter
        assert max(moved[name].values()) < 1e-5
    assert moved["batch"]["batch_dependence_training"] > 1e-3 and moved["batch"]["padding_dependence_training"] > 1e-3
    assert moved["batch"]["batch_dependence_inference"] < 1e-5  # moving statistics at inference


def test_unscaled_logits_start_with_more_peaked_attention_the_bigger_the_heads():
    source, target = digits.make_dataset(32, 5, "reverse", seed=1)
    peak = {}
    for num_heads, head_size in ((4, 16), (1, 128)):
        for name, scale in (("scaled", None), ("none", 1.0)):
            keras.utils.set_random_seed(0)
            model = Seq2SeqTransformer.from_preset("tiny", source_vocab_size=digits.VOCAB_SIZE,
                                                   target_vocab_size=digits.VOCAB_SIZE, max_length=7, dropout=0.0,
                                                   dim=num_heads * head_size, num_heads=num_heads,
                                                   attention_scale=scale)
            peak[head_size, name] = experiments.init_max_weight(model, source, target)
    assert peak[128, "none"] > peak[16, "none"] > peak[16, "scaled"]
    assert all(0.0 < value <= 1.0 for value in peak.values())


def test_the_learning_rate_schedules_of_the_warmup_experiment():
    constant = experiments.learning_rate_schedule(1e-2, 100, False)
    assert constant == 1e-2
    warm = experiments.learning_rate_schedule(1e-2, 100, True)
    cosine = experiments.learning_rate_schedule(1e-2, 100, 0.0)
    assert float(warm(0)) == pytest.approx(0.0) and float(warm(10)) == pytest.approx(1e-2, rel=1e-5)
    assert float(cosine(0)) == pytest.approx(1e-2, rel=1e-5) and float(cosine(50)) == pytest.approx(5e-3, rel=1e-4)


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
    generated = trained_reverser.generate(source, max_new_tokens=MAX_DIGITS + 1, start_id=START, end_id=END)
    per_row = np.all(generated == target[:, 1:], axis=1)
    assert 0.3 < per_row.mean() < 0.7  # some right, some wrong: the comparison means something
    assert experiments.greedy_exact_match(trained_reverser, source, target) == pytest.approx(per_row.mean())


def test_two_lookup_task_labels_a_before_both_b_and_c():
    ids, labels = experiments.make_two_lookup_task(500, seed=3)
    assert 0.2 < labels.mean() < 0.5  # A first among three: 1/3 of the time
    for row, label in zip(ids, labels):
        a, b, c = (int(np.argmax(row == token)) for token in (1, 2, 3))
        assert label == int(a < b and a < c)


def test_repeat_rate_counts_tokens_equal_to_the_one_before_up_to_the_end():
    end = digits.END
    tokens = np.array([[5, 5, 5, 6, end, 7, 7], [8, 9, end, 0, 0, 0, 0]])
    assert experiments.repeat_rate(tokens) == pytest.approx(2 / 4)  # 3 + 1 neighbour pairs, 2 repeats


def test_a_block_without_residuals_does_not_carry_its_input_through():
    import keras

    x = np.random.default_rng(0).normal(size=(2, 5, 16)).astype("float32")
    plain = experiments.EncoderBlockWithoutResidual(num_heads=2, mlp_dim=32)
    full = experiments.EncoderBlock(num_heads=2, mlp_dim=32)
    for block in (plain, full):  # every weight zero: both sublayers output 0
        block(x)
        block.set_weights([np.zeros(w.shape, "float32") for w in block.get_weights()])
    np.testing.assert_allclose(keras.ops.convert_to_numpy(full(x)), x, atol=1e-6)  # the residual path: x itself
    np.testing.assert_allclose(keras.ops.convert_to_numpy(plain(x)), 0.0, atol=1e-6)  # nothing gets through
    for bad in ("group", None):
        with pytest.raises(ValueError, match="normalization"):
            experiments.EncoderBlockWithNorm(num_heads=2, mlp_dim=32, normalization=bad)


def test_bad_experiment_name_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        experiments.main(["depth"])
    assert exit_info.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_attention_without_softmax_uses_the_scaled_scores_as_weights():
    import keras

    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    layer = experiments.AttentionWithoutSoftmax(num_heads=2)
    real = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], bool)
    _, weights = layer(x, x, query_mask=real, value_mask=real, return_attention_scores=True)
    weights = keras.ops.convert_to_numpy(weights)
    q = np.einsum("blc,chd->blhd", x, keras.ops.convert_to_numpy(layer.query_dense.kernel)) \
        + keras.ops.convert_to_numpy(layer.query_dense.bias)
    k = np.einsum("blc,chd->blhd", x, keras.ops.convert_to_numpy(layer.key_dense.kernel)) \
        + keras.ops.convert_to_numpy(layer.key_dense.bias)
    scores = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(4)
    scores[1, :, :, 3:] = 0.0  # padded keys get nothing
    np.testing.assert_allclose(weights, scores, atol=1e-5)
    assert np.abs(weights.sum(-1) - 1.0).max() > 0.1  # not a distribution: nothing makes the rows sum to 1
    block = experiments.EncoderBlockWithoutSoftmax(num_heads=2, mlp_dim=16)
    block(x)
    assert isinstance(block.attention, experiments.AttentionWithoutSoftmax)
    assert block.attention.get_config()["num_heads"] == 2


def test_concatenating_then_projecting_is_adding_with_a_learned_map_on_each_part():
    import keras

    layer = experiments.ConcatThenProject(vocab_size=12, dim=8, max_length=10)
    ids = np.array([[3, 4, 5, 0], [6, 7, 0, 0]], "int32")
    out = keras.ops.convert_to_numpy(layer(ids))
    both = keras.ops.convert_to_numpy(layer.embedding(ids))  # (2, 4, 16): [e; p]
    e, p = both[..., :8], both[..., 8:]
    kernel, bias = (keras.ops.convert_to_numpy(w) for w in layer.project.weights)
    np.testing.assert_allclose(out, e @ kernel[:8] + p @ kernel[8:] + bias, atol=1e-5)  # W_e·e + W_p·p
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(layer.compute_mask(ids)), ids > 0)
    # The combine experiment's classifier with it (CI leaves that experiment's runs to --run-large).
    model = experiments.encoder_classifier(experiments.EncoderBlock, depth=1, dim=8, num_heads=2, combine="project")
    assert keras.ops.convert_to_numpy(model(ids)).shape == (2, 2)
