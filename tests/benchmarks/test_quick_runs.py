"""The benchmarks' `--quick` runs: tiny sizes, one round, in this process. It checks that each script still
runs against today's library (and keras-hub's and transformers' APIs) and prints its table; the numbers mean
nothing (docs/results.md has the real runs). The benchmarks that need data or a GPU have their own tests here
(cifar10_budget, fast_path, gpu_check, translate_ablation); the ones that read IMDB or compare with `transformers`
run on a tiny aclImdb folder and a tiny BERT that `transformers` writes. imdb_attention_change reads a finished
fine-tune: it runs on the recipe's quick one, in tests/recipes/test_imdb_classifier.py."""

import pytest

from tests.helpers import load_script

pytestmark = pytest.mark.tensorflow_only(reason="the scripts' own check; their backend comparisons are in results.md")

# script -> extra arguments, and a line of the table it prints
QUICK = {
    "encoder_throughput": ([], "keras_tfm.EncoderBlock"),
    "generation_speed": ([], "keras_tfm greedy, use_cache=True"),
    "lm_throughput": ([], "keras_tfm.TransformerLM"),
    "data_checks": ([], "| reverse_digits tiny |"),
    "pooled_vit_attribution": ([], "pool=cls "),
    "explorer_page_size": ([], "cifar10_vit tiny, 2 drawn epochs"),
    "vit_throughput": ([], "keras_hub.models.ViTBackbone + Dense "),
    "atomic_writes": ([], "keras_tfm / keras: "),
    "conv_stem": ([], "keras Conv2D + MaxPooling2D "),
}


@pytest.mark.parametrize("script", list(QUICK))
def test_quick_run_prints_its_table(script, capsys):
    arguments, expected = QUICK[script]
    load_script(f"benchmarks/{script}.py").main(["--quick", *arguments])
    out = capsys.readouterr().out
    assert "--quick:" in out and expected in out, out[-2000:]
    assert "WARNING" not in out, out[-2000:]  # vit_throughput: the two ViTs' parameter counts are equal


def test_the_fine_tuning_step_benchmark_runs_against_transformers(tmp_path, capsys):
    """benchmarks/text_finetune_speed.py on a tiny random BERT that `transformers` writes (the real run uses
    all-MiniLM-L6-v2): ours and transformers' step, side by side."""
    from tests.pretrained_checkpoints import write_checkpoint

    folder, _ = write_checkpoint(tmp_path / "bert", "bert")
    load_script("benchmarks/text_finetune_speed.py").main(["--quick", "--pretrained", str(folder),
                                                            "--precision", "float32", "--jit", "off"])
    out = capsys.readouterr().out
    assert "ours/theirs" in out and "transformers" in out, out[-2000:]


def test_the_parity_benchmark_finds_a_loaded_checkpoint_equal_to_transformers(tmp_path, capsys):
    """benchmarks/pretrained_parity.py on a tiny random BERT and a tiny aclImdb folder: the ids are transformers'
    own and the states, the pooler and every attention map agree to float32 rounding."""
    from tests.data.samples import write_acl_imdb
    from tests.pretrained_checkpoints import write_checkpoint

    folder, _ = write_checkpoint(tmp_path / "bert", "bert")
    imdb = write_acl_imdb(tmp_path / "aclImdb", per_class=4)
    report = load_script("benchmarks/pretrained_parity.py").main(["--quick", "--pretrained", str(folder),
                                                                  "--imdb-dir", str(imdb)])
    assert report["tokenizer_ids_identical"] and report["texts"] > 6
    assert max(report["max_abs_difference_at_real_tokens"].values()) < 1e-4


def test_the_transformers_fine_tune_reference_runs_on_the_recipes_reviews(tmp_path, capsys):
    """benchmarks/imdb_transformers_finetune.py (the reference beside the recipe's fine-tune) on a tiny BERT and a
    tiny aclImdb folder: it trains and writes its JSON."""
    import json

    from tests.data.samples import write_acl_imdb
    from tests.pretrained_checkpoints import write_checkpoint

    folder, _ = write_checkpoint(tmp_path / "bert", "bert")
    imdb = write_acl_imdb(tmp_path / "aclImdb", per_class=16)
    output = tmp_path / "reference.json"
    load_script("benchmarks/imdb_transformers_finetune.py").main(["--quick", "--pretrained", str(folder), "--imdb-dir",
                                                                  str(imdb), "--output", str(output)])
    result = json.loads(output.read_text())
    assert 0.0 <= result["test_accuracy"] <= 1.0, result


def test_the_neural_imdb_baselines_run_on_the_recipes_reviews(tmp_path, capsys):
    """benchmarks/imdb_baselines.py's CNN and BiLSTM on a tiny aclImdb folder (TF-IDF needs scikit-learn, which CI
    does not install): each trains and is scored on the test reviews."""
    from tests.data.samples import write_acl_imdb

    imdb = write_acl_imdb(tmp_path / "aclImdb", per_class=16)
    load_script("benchmarks/imdb_baselines.py").main(["--quick", "--neural", "--no-tfidf", "--imdb-dir", str(imdb)])
    out = capsys.readouterr().out
    assert "kim_cnn" in out and "bilstm" in out and "test accuracy" in out, out[-2000:]


def test_the_scoring_benchmark_counts_positions_and_times_both_paths(tmp_path, capsys):
    """benchmarks/imdb_scoring.py on a tiny BERT and a tiny aclImdb folder: the positions of each way of batching
    the test reviews, in the order they must come, and both scoring paths timed on the same weights."""
    from tests.data.samples import write_acl_imdb
    from tests.pretrained_checkpoints import write_checkpoint

    folder, _ = write_checkpoint(tmp_path / "bert", "bert")
    imdb = write_acl_imdb(tmp_path / "aclImdb", per_class=16)
    result = load_script("benchmarks/imdb_scoring.py").main([
        "--checkpoint", str(folder), "--imdb-dir", str(imdb), "--reviews", "8", "--max-length", "32",
        "--rounds", "1"])
    real, padded, recipe, tight = result["positions"].values()
    assert real <= tight <= recipe <= padded, result["positions"]
    assert min(result["reviews_per_second"].values()) > 0
    assert "XLA / graph:" in capsys.readouterr().out


def test_the_timm_fine_tune_reference_follows_the_recipes_schedule():
    """benchmarks/cifar10_timm_finetune.py (timm's fine-tune of the checkpoint beside `cifar10_vit --pretrained`)
    sets PyTorch's learning rate at every step from its own copy of the recipe's schedule; it must be
    `PlannedWarmupCosine`'s, warm-up and cosine alike. (The script itself needs timm, which CI does not install:
    timm needs torchvision, whose wheels here are built for CUDA, not for CI's CPU-only torch.)"""
    import keras
    import numpy as np

    from keras_tfm.schedules import PlannedWarmupCosine

    reference = load_script("benchmarks/cifar10_timm_finetune.py")
    for total, fraction in ((704, 0.1), (37, 0.25), (5, 0.0)):
        ours = PlannedWarmupCosine(1e-4, total, fraction)
        theirs = reference.warmup_cosine(1e-4, total, fraction)
        steps = np.arange(total + 2)
        expected = keras.ops.convert_to_numpy(ours(keras.ops.convert_to_tensor(steps)))
        # atol: float32's rounding where the rate nears 0
        np.testing.assert_allclose([theirs(int(step)) for step in steps], expected, rtol=1e-5, atol=1e-10)
