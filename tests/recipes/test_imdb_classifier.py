import csv
import json
import os
import re
import shutil
import warnings

import keras
import numpy as np
import pytest

from keras_tfm.data import imdb, word_ids
from keras_tfm.models import TextClassifier
from keras_tfm.text import TextClassifierPipeline
from recipes import common, imdb_classifier
from tests.data.samples import ONLY_TEST, ONLY_UNLABELLED, write_acl_imdb
from tests.helpers import load_script
from tests.recipes.saved_models import KeepModel

pytestmark = pytest.mark.tensorflow_only  # the loaders and TextVectorization run on tf.data


@pytest.mark.slow
@pytest.mark.every_backend
@pytest.mark.filterwarnings("error:Glyph:UserWarning")  # the reviews' "\x97" is drawn as a space, not as a box
def test_quick_run_on_a_folder_writes_every_promised_file(tmp_path, capsys, loads_without_recipes):
    folder = write_acl_imdb(tmp_path / "aclImdb", beyond_ascii=True)  # read on every backend
    output_dir = tmp_path / "run"
    keep = KeepModel()
    # Four epochs of 8 steps learn the sample reviews' sentiment words (84-91% on the 32 test reviews, TF/JAX/PyTorch).
    summary = imdb_classifier.main(["--quick", "--imdb-dir", str(folder), "--output-dir", str(output_dir),
                                    "--epochs", "4", "--batch-size", "4", "--learning-rate", "3e-3"],
                                   extra_callbacks=[keep])
    loads_without_recipes(output_dir / "model.keras", keep.trained)  # where only keras_tfm is installed

    for name in ("model.keras", "history.csv", "curves.png", "summary.json", "vocabulary.txt",
                 "classifier/model.keras", "classifier/vocabulary.txt", "classifier/classifier.json"):
        assert os.path.getsize(output_dir / name) > 0, name
    reviews = sorted(name for name in os.listdir(output_dir) if name.startswith("review_"))
    assert reviews == ["review_0.png", "review_1.png", "review_2.png", "review_3.png"]
    attention = os.listdir(output_dir / "attention")
    assert {f"epoch_001_tokens_{i}.png" for i in range(4)} <= set(attention)
    page = (output_dir / "attention" / "attention.html").read_text(encoding="utf-8")
    assert '"views":["head","model","change"]' in page

    saved = json.loads((output_dir / "summary.json").read_text())
    assert saved["metrics"] == summary["metrics"]
    assert saved["flags"]["quick"] is True and saved["flags"]["epochs"] == 4  # --quick keeps an --epochs given

    # The saved model and vocabulary are enough to classify new text.
    vocabulary = word_ids.load_vocabulary(output_dir / "vocabulary.txt")
    assert vocabulary[:2] == ["", "[UNK]"] and "great" in vocabulary and "awful" in vocabulary
    model = keras.saving.load_model(output_dir / "model.keras")
    assert isinstance(model, TextClassifier) and model.vocab_size == len(vocabulary)
    vectorizer = word_ids.make_vectorizer(len(vocabulary), model.max_length, vocabulary=vocabulary)
    texts = ["A great, moving film.", "Awful.<br />A waste", "unknown words only"]
    logits = model.predict(vectorizer(np.array(texts)), verbose=0)

    # ... and the saved classifier does it in one call, giving exactly those numbers.
    pipeline = TextClassifierPipeline.load(output_dir / "classifier")
    assert pipeline.class_names == ["negative", "positive"] and pipeline.vocabulary == vocabulary
    probabilities = pipeline.predict(texts)
    np.testing.assert_allclose(probabilities, keras.ops.convert_to_numpy(keras.ops.softmax(logits)), atol=1e-6)

    # The reported test accuracy is the saved classifier's on the folder's test reviews (one review's flip allowed:
    # the recipe scores in length buckets, the pipeline pads to max_length).
    _, test = imdb.load_folder(str(folder))
    test_texts, test_labels = imdb.texts_and_labels(test)
    scored = np.mean(np.argmax(pipeline.predict(list(test_texts)), axis=-1) == test_labels)
    assert abs(saved["metrics"]["test_accuracy"] - scored) <= 1 / len(test_labels) + 1e-9
    assert scored >= 0.75  # chance is 0.5: guessing gets 24 of 32 right 0.4% of the time

    # --predict prints the same probabilities from the run folder, without training.
    before = {name: os.path.getmtime(output_dir / name) for name in os.listdir(output_dir)}
    capsys.readouterr()
    predicted = imdb_classifier.main(["--predict", str(output_dir), *texts])
    np.testing.assert_array_equal(predicted["probabilities"], probabilities)
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-4:-1] == [f"negative {p[0]:.3f}  positive {p[1]:.3f}  {text}"
                            for p, text in zip(probabilities, texts)]
    assert lines[-1] == ("    note: every one of its words is unknown to the vocabulary ([UNK]): "
                         "the score says nothing about this text")
    assert {name: os.path.getmtime(output_dir / name) for name in os.listdir(output_dir)} == before

    # --input classifies the texts of files into a CSV, one row per input; the lines it cannot classify are named.
    lines, table, written = tmp_path / "reviews.txt", tmp_path / "reviews.csv", tmp_path / "predictions.csv"
    lines.write_bytes(f"{texts[0]}\n\n".encode() + b"caf\xe9\n" + texts[1].encode())
    table.write_text(f'id,text\n7,"{texts[0]}"\n8,{texts[2]}\n')
    capsys.readouterr()
    result = imdb_classifier.main(["--predict", str(output_dir), "--input", str(lines), str(table),
                                   "--output-csv", str(written)])
    rows = list(csv.DictReader(open(written)))
    assert [row["source"] for row in rows] == [f"{lines}:{n}" for n in (1, 2, 3, 4)] + [f"{table}:2", f"{table}:3"]
    assert [row["problem"] for row in rows] == ["", "empty (no non-blank character)", "not UTF-8 text", "", "", ""]
    expected = pipeline.predict([texts[0], texts[1], texts[0], texts[2]])
    scored = np.array([[float(row["p_negative"]), float(row["p_positive"])] for row in rows if not row["problem"]])
    np.testing.assert_allclose(scored, expected, atol=2e-6)
    assert [row["label"] for row in rows if not row["problem"]] == [["negative", "positive"][k] for k in
                                                                      expected.argmax(-1)]
    assert result["problems"] == {f"{lines}:2": "empty", f"{lines}:3": "encoding"}
    out = capsys.readouterr().out
    assert f"wrote {written}: 4 texts classified, 2 could not be (their rows say why):\n  {lines}:2: empty" in out
    with pytest.raises(SystemExit) as refused:  # a CSV already there is never replaced
        imdb_classifier.main(["--predict", str(output_dir), "--input", str(lines), "--output-csv", str(written)])
    assert refused.value.code == 2 and "--output-csv" in capsys.readouterr().err


@pytest.mark.parametrize("flags", [["--data-dir", "{empty}"], ["--imdb-dir", "{empty}"]])
def test_missing_data_is_explained_without_a_traceback(flags, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    flags = [flag.format(empty=tmp_path / "empty") for flag in flags]
    with pytest.raises(SystemExit) as exit_info:
        imdb_classifier.main(["--quick", "--output-dir", str(tmp_path / "run"), *flags])
    assert exit_info.value.code == 2
    message = capsys.readouterr().err
    assert "--imdb-dir path/to/aclImdb" in message and "--data-dir" in message and "aclImdb_v1.tar.gz" in message
    assert "Traceback" not in message
    assert not os.path.exists(tmp_path / "run")  # nothing written for a run that could not start


@pytest.mark.parametrize(
    "flags", [["--epochs", "-1"], ["--preset", "huge"], ["--pool", "max"], ["--vocab-size", "0"], ["--dropout", "1.5"],
              ["--predict", "runs/x"], ["--predict"], ["--input", "reviews.txt"],
              ["--predict", "runs/x", "Great.", "--input", "reviews.txt"]]
)
def test_bad_flags_are_usage_errors(flags, capsys):
    with pytest.raises(SystemExit) as exit_info:
        imdb_classifier.main(flags)
    assert exit_info.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_without_data_or_network_the_recipe_answers_at_once(network_unreachable, tmp_path, capsys):
    pytest.importorskip("tensorflow_datasets")
    with pytest.raises(SystemExit) as exit_info:
        imdb_classifier.main(["--quick", "--output-dir", str(tmp_path / "run")])  # no --imdb-dir, no --data-dir
    assert exit_info.value.code == 2
    message = capsys.readouterr().err
    assert "cannot connect to ai.stanford.edu" in message and "--imdb-dir path/to/aclImdb" in message
    assert len(network_unreachable.connections) == 1 and network_unreachable.downloads == []
    assert os.listdir(tmp_path) == []  # no run folder, no tensorflow-datasets folder


def test_predict_on_a_folder_without_a_classifier_says_where_it_looks(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        imdb_classifier.main(["--predict", str(tmp_path), "A great film."])
    assert exit_info.value.code == 2
    message = capsys.readouterr().err
    assert "has no classifier.json" in message and "RUN_DIR/classifier" in message and "Traceback" not in message


@pytest.mark.slow
def test_pretraining_then_fine_tuning_and_reusing_the_encoder(tmp_path, capsys):
    folder = write_acl_imdb(tmp_path / "aclImdb", per_class=24, unsup=60)
    run = tmp_path / "run"
    summary = imdb_classifier.main(["--quick", "--imdb-dir", str(folder), "--output-dir", str(run),
                                    "--pretrain-epochs", "1", "--no-attention-maps"])
    encoder_dir = run / "encoder"
    for name in ("model.keras", "vocabulary.txt", "history.csv", "summary.json"):
        assert os.path.getsize(encoder_dir / name) > 0, name
    # The vocabulary comes from the unlabelled and training reviews, never the test reviews; [MASK] is id 2.
    vocabulary = word_ids.load_vocabulary(encoder_dir / "vocabulary.txt")
    assert vocabulary[:3] == ["", "[UNK]", "[MASK]"]
    assert ONLY_UNLABELLED in vocabulary and ONLY_TEST not in vocabulary
    assert word_ids.load_vocabulary(run / "vocabulary.txt") == vocabulary
    # Pre-training read the 60 unlabelled reviews and the 44 training reviews left after holding out 10% of
    # each class (2 of 24).
    assert summary["pretraining"]["documents"] == 60 + 44
    assert set(summary["metrics"]) == {"validation_accuracy", "test_accuracy"}
    history = common.read_history(encoder_dir)
    assert set(history) >= {"loss", "accuracy", "val_loss", "val_accuracy"}

    # An interrupted run (no summary.json) resumes after the finished pre-training instead of repeating it.
    os.remove(run / "summary.json")
    shutil.rmtree(run / "backup", ignore_errors=True)
    before = os.path.getmtime(encoder_dir / "model.keras")
    capsys.readouterr()
    imdb_classifier.main(["--quick", "--imdb-dir", str(folder), "--output-dir", str(run), "--pretrain-epochs", "1",
                          "--no-attention-maps"])
    assert "reusing the finished pre-training" in capsys.readouterr().out
    assert os.path.getmtime(encoder_dir / "model.keras") == before

    # --encoder fine-tunes a saved encoder: its vocabulary and size, whatever --preset says.
    again = imdb_classifier.main(["--quick", "--imdb-dir", str(folder), "--output-dir", str(tmp_path / "again"),
                                  "--encoder", str(encoder_dir), "--preset", "small", "--no-attention-maps"])
    model = keras.saving.load_model(tmp_path / "again" / "model.keras")
    encoder = keras.saving.load_model(encoder_dir / "model.keras")
    assert (model.encoder.dim, model.encoder.depth, model.vocab_size) == (encoder.encoder.dim, encoder.encoder.depth,
                                                                        len(vocabulary))
    assert again["flags"]["learning_rate"] == 5e-4  # fine-tuning's default


def test_encoder_flag_errors_are_clear(tmp_path, capsys):
    folder = write_acl_imdb(tmp_path / "aclImdb", per_class=4)
    with pytest.raises(SystemExit) as exit_info:
        imdb_classifier.main(["--quick", "--imdb-dir", str(folder), "--output-dir", str(tmp_path / "run"),
                              "--encoder", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "is not an encoder folder: missing model.keras, vocabulary.txt" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        imdb_classifier.parse_args(["--encoder", str(tmp_path), "--pretrain-epochs", "1"])
    assert "exclude each other" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.every_backend
def test_quick_fine_tune_of_a_pretrained_checkpoint(tmp_path, capsys):
    """`--pretrained FOLDER` on a tiny random BERT written by transformers: the checkpoint's tokenizer, a new head,
    the attention explorer over the parts of the epoch, and a saved pipeline that --predict reads."""
    from tests.pretrained_checkpoints import write_checkpoint

    folder = write_acl_imdb(tmp_path / "aclImdb")
    checkpoint, _ = write_checkpoint(str(tmp_path / "bert"), "bert")
    output_dir = tmp_path / "run"
    imdb_classifier.main(["--quick", "--imdb-dir", str(folder), "--pretrained", checkpoint,
                          "--output-dir", str(output_dir), "--sequence-length", "32"])
    printed = capsys.readouterr().out
    # The path chosen for this machine (the measured table's on a CPU with bf16 units, else the measured products),
    # said at the start as summary.json records it.
    flags = json.loads((output_dir / "summary.json").read_text())["flags"]
    policy = "mixed_" + flags["mixed_precision"] if flags["mixed_precision"] else "float32"
    assert policy in ("float32", "mixed_bfloat16") and flags["jit"] in ("auto", True, False)
    assert re.search(rf"^{policy}, jit_compile={flags['jit']!r}: ", printed, re.MULTILINE)
    assert "32 word pieces (head_tail)" in printed
    for name in ("summary.json", "curves.png", "classifier/model.keras", "classifier/classifier.json",
                 "classifier/tokenizer/tokenizer.json", "attention/attention.html", "review_0.png"):
        assert os.path.getsize(output_dir / name) > 0, name
    assert not os.path.exists(output_dir / "model.keras")  # one model file per run: the pipeline's
    assert {f"epoch_00{i}_tokens_0.png" for i in (0, 1, 2, 3, 4)} <= set(os.listdir(output_dir / "attention"))
    saved = json.loads((output_dir / "summary.json").read_text())
    assert saved["pretrained"]["model_type"] == "bert" and saved["model"] == "classifier/model.keras"
    assert not set(imdb_classifier.FROM_SCRATCH_FLAGS) & set(saved["flags"])  # only the flags this path read
    assert saved["flags"]["batch_size"] == 32 and saved["flags"]["lora_rank"] == 0
    history = common.read_history(output_dir)
    assert len(history["loss"]) == 4  # the epoch in four parts

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = keras.saving.load_model(output_dir / "classifier" / "model.keras")
    assert isinstance(model, TextClassifier) and model.pool == "pooler" and model.encoder.norm_first is False
    # No optimizer stored, nor the compile arguments that would build one: loaded plainly, the model is uncompiled,
    # and Keras has no optimizer variables to skip and warn about.
    assert getattr(model, "optimizer", None) is None and not model.compiled
    assert not [w for w in caught if issubclass(w.category, UserWarning)], [str(w.message) for w in caught]
    pipeline = TextClassifierPipeline.load(output_dir / "classifier")
    texts = ["the film was great", "dull and too long"]
    ids = pipeline.tokenizer(texts)
    assert ids["token_ids"].shape == (2, 32) and ids["token_ids"][0, 0] == 2  # [CLS]
    probabilities = pipeline.predict(texts)
    np.testing.assert_allclose(probabilities, keras.ops.convert_to_numpy(
        keras.ops.softmax(model.predict(ids, verbose=0))), atol=1e-6)
    predicted = imdb_classifier.main(["--predict", str(output_dir), *texts])
    np.testing.assert_allclose(predicted["probabilities"], probabilities, atol=1e-6)

    # --export writes a SavedModel that takes strings (TensorFlow only: it is a TensorFlow graph).
    served = tmp_path / "served"
    if keras.backend.backend() != "tensorflow":
        with pytest.raises(SystemExit):
            imdb_classifier.main(["--export", str(output_dir), str(served)])
        assert "run it on the TensorFlow backend" in capsys.readouterr().err and not served.exists()
        return  # the benchmark below runs keras.ops code these lines have already run on this backend
    import tensorflow as tf

    capsys.readouterr()
    imdb_classifier.main(["--export", str(output_dir), str(served)])
    assert f"wrote {served}: a SavedModel whose serving_default signature takes `texts`" in capsys.readouterr().out
    out = tf.saved_model.load(str(served)).signatures["serving_default"](texts=tf.constant(texts))
    np.testing.assert_allclose(out["probabilities"].numpy(), probabilities, atol=1e-5)
    assert [label.decode() for label in out["label"].numpy()] == pipeline.classify(texts)
    with pytest.raises(SystemExit):  # an existing folder is never replaced
        imdb_classifier.main(["--export", str(output_dir), str(served)])
    assert "exists; it is never replaced" in capsys.readouterr().err
    # benchmarks/imdb_attention_change.py --quick reads this finished run (what it publishes comes from the real one)
    load_script("benchmarks/imdb_attention_change.py").main([
        "--quick", "--pretrained", checkpoint, "--run", str(output_dir), "--imdb-dir", str(folder),
        "--output", str(tmp_path / "change")])
    printed = capsys.readouterr().out
    assert "--quick:" in printed and "layers by attention moved: [" in printed and "most changed head: " in printed
    for name in ("imdb_change.png", "imdb_change_row.png"):
        assert os.path.getsize(tmp_path / "change" / name) > 0, name


def test_pretrained_excludes_pretraining_and_a_bad_folder_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        imdb_classifier.parse_args(["--pretrained", "x", "--pretrain-epochs", "1"])
    assert exit_info.value.code == 2
    with pytest.raises(SystemExit) as exit_info:
        imdb_classifier.main(["--pretrained", str(tmp_path), "--imdb-dir", str(tmp_path)])
    assert exit_info.value.code == 2 and "No config.json" in capsys.readouterr().err
