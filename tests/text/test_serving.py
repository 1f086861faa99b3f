"""The string-serving SavedModel: the WordPiece tokenizer rebuilt from TensorFlow ops gives the ids the
checkpoint's own tokenizer gives, and the SavedModel, loaded where keras_tfm is never imported, scores strings as
the Python pipeline does."""

import os
import string
import subprocess
import sys

import keras
import numpy as np
import pytest

from keras_tfm.models import TextClassifier
from keras_tfm.text import PretrainedTokenizer, TextClassifierPipeline
from tests.pretrained_checkpoints import SPECIAL, WORDS, transformers_or_skip

pytestmark = pytest.mark.tensorflow_only(reason="a SavedModel is a TensorFlow graph; TF Text's WordPiece kernel")
tf_text = pytest.importorskip("tensorflow_text", reason="TF Text's FastWordpieceTokenizer")
from keras_tfm.text.serving import StringTokenizer, export_saved_model, tokenize_like_pretrained  # noqa: E402

# Words and pieces that the texts below need: letters and digits one by one, punctuation, a CJK character.
PIECES = SPECIAL + WORDS + list(string.ascii_lowercase) + list(string.digits) + list("!\"#$%&'()*+-/:;<=>?@[\\]^_`{|}~") \
    + ["##" + c for c in string.ascii_lowercase] + ["中", "文", "café", "br", "##s", "##ed"]
TEXTS = [
    "The film was great!",
    "Café au LAIT, naïve résumé…",          # accents stripped after NFD, an ellipsis is punctuation
    "I loved it.<br /><br />Too long",      # HTML breaks as IMDB has them
    "中文film 中",                            # CJK characters are words of their own
    "control\x07char\tand\u00a0spaces\u2028here",  # a control character removed, every space a space
    "killer\x85and\x0bfails",             # NEL and VT are control characters: removed, not spaces (an IMDB review)
    "emoji 😀 and ™ signs",                  # a symbol outside the vocabulary: [UNK]
    "wonderfully dull, " * 30,              # longer than max_length: truncated
    "x" * 120 + " film",                    # a word over 100 characters: [UNK]
    "   ",                                   # nothing but [CLS] [SEP]
    "ÀÉÎÕÜ İstanbul ǅ",                     # upper-case accented letters, special lower-casing
]


@pytest.fixture(scope="module")
def tokenizer_folder(tmp_path_factory):
    transformers = transformers_or_skip()
    folder = tmp_path_factory.mktemp("wordpiece")
    with open(folder / "vocab.txt", "w", encoding="utf-8") as file:
        file.write("\n".join(dict.fromkeys(PIECES)) + "\n")
    transformers.BertTokenizerFast(str(folder / "vocab.txt"), do_lower_case=True).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("truncation, head", [("head", None), ("head_tail", None), ("head_tail", 5)])
def test_the_graph_tokenizer_gives_the_checkpoint_tokenizers_ids(tokenizer_folder, truncation, head):
    tokenizer = PretrainedTokenizer(str(tokenizer_folder), max_length=24, truncation=truncation, head=head)
    expected = tokenizer(TEXTS)
    ours = tokenize_like_pretrained(tokenizer, TEXTS)
    assert set(ours) == set(expected)
    for name in expected:
        np.testing.assert_array_equal(ours[name], expected[name], err_msg=name)
    assert (expected["token_ids"] == 1).any()  # [UNK] was met: the comparison covers it


def test_a_byte_level_bpe_tokenizer_is_refused(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    bpe = Tokenizer(models.BPE(vocab={"<pad>": 0, "<unk>": 1, "a": 2, "b": 3, "ab": 4}, merges=[("a", "b")],
                               unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel()  # RoBERTa's and GPT-2's
    bpe.save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(ValueError, match="exports BERT-style WordPiece tokenizers.*model 'BPE'.*Byte-level BPE"):
        StringTokenizer(PretrainedTokenizer(str(tmp_path), max_length=16))


_SERVE = """
import sys
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (its kernels)
served = tf.saved_model.load(sys.argv[1])
texts = [line for line in open(sys.argv[2], encoding="utf-8").read().split("\\x1e")]
out = served.signatures["serving_default"](texts=tf.constant(texts))
np.save(sys.argv[3], out["probabilities"].numpy())
print(" ".join(label.decode() for label in out["label"].numpy()))
print("keras_tfm" in sys.modules)
"""


@pytest.mark.slow
def test_the_saved_model_takes_strings_and_scores_as_the_pipeline_does(tokenizer_folder, tmp_path):
    tokenizer = PretrainedTokenizer(str(tokenizer_folder), max_length=24, truncation="head_tail")
    keras.utils.set_random_seed(0)
    model = TextClassifier.from_preset("tiny", vocab_size=tokenizer.vocab_size, max_length=24, num_classes=2,
                                       pool="cls", num_segments=2)  # as BERT: the tokenizer gives segment ids
    pipeline = TextClassifierPipeline(model, tokenizer, ["negative", "positive"])
    texts = [text for text in TEXTS if text.strip()]  # the pipeline refuses a blank text
    expected = pipeline.predict(texts)
    export_saved_model(pipeline, str(tmp_path / "served"))
    (tmp_path / "texts").write_text("\x1e".join(texts), encoding="utf-8")
    done = subprocess.run([sys.executable, "-c", _SERVE, str(tmp_path / "served"), str(tmp_path / "texts"),
                           str(tmp_path / "p.npy")], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": ""}, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    labels, imported = done.stdout.strip().splitlines()[-2:]
    assert imported == "False"  # served without keras_tfm (TensorFlow itself may load Keras' module)
    np.testing.assert_allclose(np.load(tmp_path / "p.npy"), expected, atol=1e-5)
    assert labels.split() == [pipeline.class_names[k] for k in expected.argmax(-1)]


def test_a_word_vocabulary_pipeline_is_refused_with_the_way_out(tmp_path):
    model = TextClassifier.from_preset("tiny", vocab_size=10, max_length=4, num_classes=2)
    pipeline = TextClassifierPipeline(model, ["", "[UNK]"] + [f"w{i}" for i in range(8)], ["a", "b"])
    with pytest.raises(ValueError, match="needs a pipeline with a pretrained tokenizer"):
        export_saved_model(pipeline, str(tmp_path / "x"))
