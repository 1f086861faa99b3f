import os

import keras
import pytest

from keras_tfm.models import MaskedLanguageModel, TextClassifier
from recipes import pretrain_text
from recipes.common import read_history
from tests.data.samples import make_corpus
from tests.recipes.saved_models import KeepModel

pytestmark = pytest.mark.tensorflow_only  # TextVectorization and tf.data


@pytest.mark.slow
@pytest.mark.every_backend
def test_quick_run_on_a_text_file_writes_an_encoder_folder(tmp_path, loads_without_recipes):
    corpus = tmp_path / "corpus.txt"
    english, _ = make_corpus(300, seed=0)
    corpus.write_text("\n".join(english) + "\n\n")
    run = tmp_path / "run"
    keep = KeepModel()
    summary = pretrain_text.main(["--quick", "--text-file", str(corpus), "--output-dir", str(run)],
                                 extra_callbacks=[keep])
    loads_without_recipes(run / "model.keras", keep.trained)  # where only keras_tfm is installed
    assert summary["documents"] == 300 - 6 and summary["flags"]["quick"]  # 2% held out
    last = read_history(str(run))  # the summary reports the last epoch's validation, as the history has it
    assert summary["metrics"]["validation_loss"] == pytest.approx(last["val_loss"][-1])
    assert summary["metrics"]["validation_accuracy"] == pytest.approx(last["val_accuracy"][-1])
    encoder, vocabulary = pretrain_text.load_encoder(run)
    assert isinstance(encoder, MaskedLanguageModel) and vocabulary[2] == "[MASK]" and encoder.vocab_size == len(vocabulary)
    classifier = TextClassifier.from_encoder(encoder, num_classes=2)
    ids = pretrain_text.vectorize(pretrain_text.learn_vectorizer(["a b"], 10, 8), ["a b"])  # any ids in range
    assert classifier.predict(ids, verbose=0).shape == (1, 2)


def test_documents_come_from_files_below_a_folder_and_lines_of_a_file(tmp_path):
    (tmp_path / "docs" / "more").mkdir(parents=True)
    (tmp_path / "docs" / "b.txt").write_text("second\nstill second")
    (tmp_path / "docs" / "more" / "a.txt").write_text("third")
    (tmp_path / "docs" / "notes.md").write_text("not read")
    (tmp_path / "lines.txt").write_text("one\n\n two \n")
    documents = pretrain_text.read_documents(str(tmp_path / "docs"), str(tmp_path / "lines.txt"))
    assert documents == ["second\nstill second", "third", "one", "two"]
    assert pretrain_text.read_documents(str(tmp_path / "docs"), limit=1) == ["second\nstill second"]


def test_missing_text_is_explained_without_a_traceback(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        pretrain_text.main(["--quick", "--text-dir", str(tmp_path / "nowhere"), "--output-dir", str(tmp_path / "r")])
    assert exit_info.value.code == 2 and "is not a folder" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        pretrain_text.parse_args([])
    assert "give the text to pre-train on" in capsys.readouterr().err


def test_load_encoder_refuses_a_folder_holding_another_model(tmp_path):
    keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)]).save(tmp_path / "model.keras")
    (tmp_path / "vocabulary.txt").write_text("\n[UNK]\n")
    with pytest.raises(ValueError, match="holds a Sequential, not a MaskedLanguageModel"):
        pretrain_text.load_encoder(str(tmp_path))
    os.remove(tmp_path / "vocabulary.txt")
    with pytest.raises(ValueError, match="missing vocabulary.txt"):
        pretrain_text.load_encoder(str(tmp_path))
