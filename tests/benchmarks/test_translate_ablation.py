"""benchmarks/translate_ablation.py: its rows are valid translate flags, each row runs once and is read back after,
the table compares with the baseline, and the decoding rows score a translator on the given references."""

import json

import numpy as np
import pytest

from tests.helpers import load_script

pytestmark = pytest.mark.tensorflow_only(reason="a benchmark's table logic, no backend code")


def _ablation():
    return load_script("benchmarks/translate_ablation.py")


def test_every_row_parses_with_the_forwarded_flags_and_a_typo_fails_before_any_training(tmp_path, capsys,
                                                                                       monkeypatch):
    ablation = _ablation()
    monkeypatch.chdir(tmp_path)
    args = ablation.parse_args(["--data-dir", "multi30k", "--output-dir", "runs", "--rows", "baseline", "bpe", "--",
                                "--mixed-precision", "bfloat16", "--epochs", "12"])
    assert args.rows == ["baseline", "bpe"] and args.forwarded == ["--mixed-precision", "bfloat16", "--epochs", "12"]
    # The runs start in the repository's folder: the folders given relative to this one are made absolute.
    assert (args.data_dir, args.output_dir) == (str(tmp_path / "multi30k"), str(tmp_path / "runs"))
    with pytest.raises(SystemExit) as typo:
        ablation.parse_args(["--data-dir", "d", "--output-dir", str(tmp_path), "--", "--dropuot", "0.3"])
    assert typo.value.code == 2 and "--dropuot" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # the decoding rows need the baseline's translator
        ablation.parse_args(["--data-dir", "d", "--output-dir", str(tmp_path), "--rows", "decoding"])
    with pytest.raises(SystemExit):
        ablation.parse_args(["--data-dir", "d", "--output-dir", str(tmp_path), "--beams", "0"])
    assert "--beams: must be a positive integer, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ablation.parse_args(["--data-dir", "d", "--output-dir", str(tmp_path), "--length-penalties", "-1"])
    assert "--length-penalties: must be >= 0, got -1" in capsys.readouterr().err


def _summary(val_bleu_average, best_epoch_bleu, epochs=12):
    chosen = "average" if val_bleu_average >= best_epoch_bleu else "epoch 7"
    return {"recipe": "translate", "flags": {"epochs": epochs}, "wall_time_seconds": 600.0,
            "weights_chosen": {"averaged_epochs": [8, 9, 10, 11, 12], "val_bleu_average": val_bleu_average,
                               "best_epoch": 7, "val_bleu_best_epoch": best_epoch_bleu, "chosen": chosen}}


def test_each_row_runs_once_is_scored_by_the_weights_it_kept_and_compared_with_the_baseline(tmp_path):
    ablation = _ablation()
    scores = {"baseline": (35.0, 34.0), "dropout_0.3": (36.0, 36.5)}  # dropout_0.3 keeps its best epoch
    ran = []

    def train(args, name):  # stands in for the recipe: writes the summary.json a finished translate run leaves
        ran.append(name)
        folder = tmp_path / name
        folder.mkdir()
        (folder / "summary.json").write_text(json.dumps(_summary(*scores[name])))

    argv = ["--data-dir", "d", "--output-dir", str(tmp_path), "--rows", "baseline", "dropout_0.3"]
    rows = ablation.main(argv, run=train)
    assert ran == ["baseline", "dropout_0.3"]
    assert [(r["row"], r["val_bleu"], r["chosen"]) for r in rows] == [
        ("baseline", 35.0, "average"), ("dropout_0.3", 36.5, "epoch 7")]
    table = (tmp_path / "ablation.md").read_text()
    assert "| dropout_0.3 | --dropout 0.3 | 36.50 | +1.50 | 10.0 |" in table
    assert "| baseline | the recipe's defaults | 35.00 |  | 10.0 |" in table
    assert json.loads((tmp_path / "ablation.json").read_text())["rows"] == rows
    assert ablation.main(argv, run=train) == rows and ran == ["baseline", "dropout_0.3"]  # read back, not rerun


def test_a_run_that_chose_without_validation_bleu_is_an_error_not_a_row():
    ablation = _ablation()
    assert ablation.chosen_validation_bleu(_summary(30.0, 29.0)) == 30.0
    assert ablation.chosen_validation_bleu(_summary(30.0, 31.0)) == 31.0
    with pytest.raises(ValueError, match="--bleu-every"):
        ablation.chosen_validation_bleu({"weights_chosen": {"chosen": "as trained"}})


def test_decoding_rows_score_each_beam_and_penalty_against_the_references():
    from keras_tfm.models import Seq2SeqTransformer
    from keras_tfm.text import SubwordTokenizer, Translator, corpus_bleu

    sentences = ["A dog runs on the beach.", "Two men are talking.", "A girl with a red ball.", "The cat sleeps."]
    tokenizer = SubwordTokenizer.train(sentences * 30, vocab_size=300)
    model = Seq2SeqTransformer.from_preset("tiny", source_vocab_size=tokenizer.vocab_size,
                                           target_vocab_size=tokenizer.vocab_size, max_length=8, dropout=0.0)
    a = next(i for i in range(tokenizer.vocab_size) if tokenizer.id_to_piece(i) == "▁a")
    bias = model.get_layer("output_projection").bias  # an untrained model that says "a" 8 times: 4-grams to score
    bias.assign(np.where(np.arange(bias.shape[0]) == a, 1e4, 0.0).astype("float32"))
    translator = Translator(model, tokenizer)
    references = translator.generate(sentences, strategy="greedy")
    assert references[0].split() == ["a"] * 8
    references[1] = "A cat."  # greedy decoding scores 100 on the other three
    rows = _ablation().decoding_rows(translator, sentences, references, beams=[1, 2], length_penalties=[0.6, 1.0])
    assert [r["change"] for r in rows] == ["greedy", "--num-beams 2 --length-penalty 0.6",
                                           "--num-beams 2 --length-penalty 1"]
    expected = corpus_bleu([references[0]] * 4, references)[0]
    assert 50.0 < expected < 100.0 and rows[0]["val_bleu"] == pytest.approx(expected)
    assert all(r["val_bleu"] == pytest.approx(expected) for r in rows[1:])  # the bias leaves beams no other choice
