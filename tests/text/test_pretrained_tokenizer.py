"""PretrainedTokenizer reads a checkpoint's tokenizer.json and gives the ids `transformers`' tokenizer gives."""

import os

import numpy as np
import pytest

from keras_tfm.text import PretrainedTokenizer
from tests.pretrained_checkpoints import transformers_or_skip, write_tokenizer

pytestmark = pytest.mark.tensorflow_only(reason="HuggingFace tokenizers and NumPy: no backend code")

TEXTS = ["The film was wonderful!", "I hated the plot, and the actors were not very good.", "dull",
         "A moving story. " * 12, "Ünknown wörds stay [UNK]", ""]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("tokenizer"))
    write_tokenizer(folder)
    return folder


@pytest.fixture(scope="module")
def reference(folder):
    return transformers_or_skip().AutoTokenizer.from_pretrained(folder)


def test_ids_mask_and_segments_equal_transformers_with_head_truncation(folder, reference):
    ours = PretrainedTokenizer(folder, max_length=16)(TEXTS)
    theirs = reference(TEXTS, truncation=True, max_length=16, padding="max_length", return_tensors="np")
    np.testing.assert_array_equal(ours["token_ids"], theirs["input_ids"])
    np.testing.assert_array_equal(ours["padding_mask"], theirs["attention_mask"])
    np.testing.assert_array_equal(ours["segment_ids"], theirs["token_type_ids"])
    assert ours["token_ids"].dtype == np.int32 and ours["token_ids"].shape == (len(TEXTS), 16)


def test_text_pairs_get_segment_ids_as_transformers_gives_them(folder, reference):
    first, second = TEXTS[:3], ["a good story", TEXTS[3], "it was bad"]
    ours = PretrainedTokenizer(folder, max_length=20)(first, pairs=second)
    theirs = reference(first, second, truncation=True, max_length=20, padding="max_length", return_tensors="np")
    np.testing.assert_array_equal(ours["token_ids"], theirs["input_ids"])
    np.testing.assert_array_equal(ours["segment_ids"], theirs["token_type_ids"])
    assert ours["segment_ids"].max() == 1


def test_head_and_tail_keeps_the_first_and_last_word_pieces(folder, reference):
    text = " ".join(["the film was great", "and " * 30, "i hated it !"])
    pieces = reference(text, add_special_tokens=False)["input_ids"]
    ours = PretrainedTokenizer(folder, max_length=12, truncation="head_tail", head=4)([text, "dull"])
    cls, sep = reference.cls_token_id, reference.sep_token_id
    assert ours["token_ids"][0].tolist() == [cls, *pieces[:4], *pieces[-6:], sep]
    assert ours["token_ids"][1].tolist()[:3] == [cls, reference.convert_tokens_to_ids("dull"), sep]  # short: as is
    default = PretrainedTokenizer(folder, max_length=12, truncation="head_tail")([text])  # a quarter of the room
    assert default["token_ids"][0].tolist() == [cls, *pieces[:2], *pieces[-8:], sep]


def test_save_and_load_keep_the_settings(folder, tmp_path):
    tokenizer = PretrainedTokenizer(folder, max_length=10, truncation="head_tail", head=3)
    tokenizer.save(tmp_path / "saved")
    loaded = PretrainedTokenizer.load(tmp_path / "saved")
    assert (loaded.max_length, loaded.truncation, loaded.head, loaded.padding_id) == (10, "head_tail", 3, 0)
    for name, values in tokenizer(TEXTS).items():
        np.testing.assert_array_equal(loaded(TEXTS)[name], values)
    assert tokenizer.token_labels(tokenizer(["wonderful"])["token_ids"][0, :4]) == ["[CLS]", "wonder", "##ful", "[SEP]"]


def test_bad_arguments_are_named(folder, tmp_path):
    with pytest.raises(ValueError, match="No tokenizer.json"):
        PretrainedTokenizer(str(tmp_path))
    with pytest.raises(ValueError, match=r"`truncation` must be one of \['head', 'head_tail'\]. Received: truncation='tail'"):
        PretrainedTokenizer(folder, truncation="tail")
    with pytest.raises(ValueError, match="larger than the 2 special tokens.*max_length=2"):
        PretrainedTokenizer(folder, max_length=2)
    tokenizer = PretrainedTokenizer(folder, max_length=8)
    with pytest.raises(TypeError, match="not one string"):
        tokenizer("a film")
    with pytest.raises(TypeError, match=r"list of strings.*\['int'\]"):
        tokenizer([3])
    with pytest.raises(ValueError, match="one text per text"):
        tokenizer(["a", "b"], pairs=["c"])


def _resident_mb():
    with open("/proc/self/status") as file:
        return int(file.read().split("VmRSS:")[1].split()[0]) / 1024


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads the resident size from /proc")
def test_head_and_tail_memory_does_not_grow_with_the_number_of_texts(folder):
    """Long texts cut head-and-tail leave behind only the id arrays (the old path kept ~1 MB per IMDB review)."""
    words = "the film was great and too long , i loved it but the plot was bad".split()
    texts = [" ".join(words[(i + j) % len(words)] for j in range(600)) for i in range(60)]  # 600 pieces each
    tokenizer = PretrainedTokenizer(folder, max_length=32, truncation="head_tail")
    tokenizer(texts[:5])  # the tokenizer's own start-up allocations
    before = _resident_mb()
    for _ in range(2):
        ids = tokenizer(texts)["token_ids"]
    grown = _resident_mb() - before
    assert ids.shape == (60, 32) and (ids[:, -1] != 0).all()  # every text was cut to 32 pieces
    assert grown < 40, f"resident memory grew by {grown:.0f} MB for 120 texts of 600 pieces"


@pytest.mark.parametrize("truncation", ["head", "head_tail"])
def test_reading_counts_the_pieces_kept_and_the_unknown_ones(folder, truncation):
    tokenizer = PretrainedTokenizer(folder, max_length=8, truncation=truncation)
    assert tokenizer.reading("the film was great") == (4, 4, 0)
    assert tokenizer.reading("the film " * 10) == (20, 6, 0)  # 8 minus [CLS] and [SEP]
    pieces, kept, unknown = tokenizer.reading("🎬 🍿")
    assert pieces == unknown > 0 and kept == pieces
