"""The benchmarks' `--quick` runs: tiny sizes, one round, in this process. It checks that each script still
runs against today's library and prints its table; the numbers mean nothing (docs/results.md has the real runs).
The benchmarks that need data or a GPU have their own tests here (cifar10_budget, fast_path, gpu_check,
translate_ablation); vit_throughput needs keras-hub, which CI does not install; the IMDB ones and pretrained_parity need
the real data or checkpoint (docs/results.md says how to run them)."""

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
}


@pytest.mark.parametrize("script", list(QUICK))
def test_quick_run_prints_its_table(script, capsys):
    arguments, expected = QUICK[script]
    load_script(f"benchmarks/{script}.py").main(["--quick", *arguments])
    out = capsys.readouterr().out
    assert "--quick:" in out and expected in out, out[-2000:]


def test_the_fine_tuning_step_benchmark_runs_against_transformers(tmp_path, capsys):
    """benchmarks/text_finetune_speed.py on a tiny random BERT that `transformers` writes (the real run uses
    all-MiniLM-L6-v2): ours and transformers' step, side by side."""
    from tests.pretrained_checkpoints import write_checkpoint

    folder, _ = write_checkpoint(tmp_path / "bert", "bert")
    load_script("benchmarks/text_finetune_speed.py").main(["--quick", "--pretrained", str(folder),
                                                            "--precision", "float32", "--jit", "off"])
    out = capsys.readouterr().out
    assert "ours/theirs" in out and "transformers" in out, out[-2000:]
