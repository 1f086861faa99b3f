import numpy as np
import pytest

from keras_tfm.text import END, PAD, START, SubwordTokenizer, corpus_bleu

pytestmark = pytest.mark.tensorflow_only(reason="SentencePiece and sacreBLEU: no backend code")

ENGLISH = [
    "A man in an orange hat is looking at something.",
    "Two young children are playing in the sand near the water.",
    "A black dog runs across a green field with a ball.",
    "Several people are standing outside a small red building.",
    "A woman rides her bicycle down a busy city street.",
]


@pytest.fixture(scope="module")
def tokenizer():
    return SubwordTokenizer.train(ENGLISH * 20, vocab_size=400)


def test_special_ids_follow_the_keras_tfm_convention(tokenizer):
    assert (PAD, START, END) == (0, 2, 3)
    assert tokenizer.id_to_piece(START) == "<s>" and tokenizer.id_to_piece(END) == "</s>"
    assert 260 < tokenizer.vocab_size <= 400  # 256 byte pieces + specials + learned pieces


@pytest.mark.parametrize("text", [
    ENGLISH[0],
    "A dog is running.",  # words never seen as a whole
    "Ein Mädchen isst Crème brûlée – 😀 „Zitat“ Ω≈ç 東京.",  # characters never seen: spelled as UTF-8 bytes
])
def test_encode_decode_round_trip(tokenizer, text):
    ids = tokenizer.encode([text])[0]
    assert ids and all(0 < i < tokenizer.vocab_size for i in ids)
    assert tokenizer.decode([ids]) == [text]


def test_unknown_characters_become_bytes_not_unknown(tokenizer):
    pieces = tokenizer.tokenize("😀")
    assert "<0xF0>" in pieces and "<unk>" not in pieces


def test_decode_stops_at_end_and_skips_padding_and_start(tokenizer):
    ids = tokenizer.encode_padded(ENGLISH[:2], 40, add_start=True, add_end=True)
    assert ids.shape == (2, 40) and ids.dtype == np.int32
    assert ids[0, 0] == START and (ids[0] == END).sum() == 1 and ids[0, -1] == PAD
    garbage_after_end = ids.copy()
    garbage_after_end[garbage_after_end == PAD] = 7
    assert tokenizer.decode(garbage_after_end) == ENGLISH[:2]


def test_encode_padded_cuts_long_rows_keeping_the_end_token(tokenizer):
    ids = tokenizer.encode_padded([ENGLISH[1]], 6, add_start=True, add_end=True)
    assert ids[0, 0] == START and ids[0, -1] == END
    with pytest.raises(ValueError, match="more than `length`=6"):
        tokenizer.encode_padded([ENGLISH[1]], 6, truncate=False)


def test_encode_padded_to_a_multiple_of_the_longest_row(tokenizer):
    longest = max(len(row) for row in tokenizer.encode(ENGLISH))
    ids = tokenizer.encode_padded(ENGLISH, 100, multiple=8)
    assert ids.shape == (5, -(-longest // 8) * 8) and (ids[:, longest:] == PAD).all() and (ids[:, longest - 1] != PAD).any()
    assert tokenizer.encode_padded(ENGLISH, 10, multiple=8).shape == (5, 10)  # never wider than `length`


def test_save_and_load_give_the_same_tokenizer(tokenizer, tmp_path):
    loaded = SubwordTokenizer.load(tokenizer.save(str(tmp_path / "tokenizer.model")))
    assert loaded == tokenizer
    assert loaded.encode(ENGLISH) == tokenizer.encode(ENGLISH)


def test_bpe_and_bad_arguments():
    bpe = SubwordTokenizer.train(ENGLISH * 20, vocab_size=320, model_type="bpe")
    assert bpe.decode(bpe.encode(ENGLISH)) == ENGLISH
    with pytest.raises(ValueError, match="`model_type` must be one of"):
        SubwordTokenizer.train(ENGLISH, model_type="wordpiece")
    with pytest.raises(ValueError, match="`vocab_size` must be an integer >= 8"):
        SubwordTokenizer.train(ENGLISH, vocab_size=0)
    with pytest.raises(ValueError, match="no non-empty sentence"):
        SubwordTokenizer.train(["", "  "])
    # One string in, one list of ids out, and back: decode(encode(s)) == s.
    assert bpe.decode(bpe.encode("a sentence")) == "a sentence"
    assert bpe.encode("a sentence") == bpe.encode(["a sentence"])[0]
    with pytest.raises(TypeError, match=r"a string or a list of strings. Received a list holding \['int'\]"):
        bpe.encode(["a sentence", 3])
    with pytest.raises(TypeError, match="`model_proto` must be bytes"):
        SubwordTokenizer("not a model")


def test_bleu_of_references_against_themselves_is_100():
    score, signature = corpus_bleu(ENGLISH, ENGLISH)
    assert score == pytest.approx(100.0)
    assert "tok:13a" in signature and "nrefs:1" in signature


def test_bleu_matches_sacrebleus_published_example():
    # The example of sacreBLEU's README: BLEU = 48.53 with both reference sets.
    references = [
        ["The dog bit the man.", "It was not unexpected.", "The man bit him first."],
        ["The dog had bit the man.", "No one was surprised.", "The man had bitten the dog."],
    ]
    hypotheses = ["The dog bit the man.", "It wasn't surprising.", "The man had just bitten him."]
    score, signature = corpus_bleu(hypotheses, references)
    assert score == pytest.approx(48.53, abs=0.005) and "nrefs:2" in signature
    assert corpus_bleu(hypotheses, references[0])[0] < score  # fewer references, fewer matched n-grams
    assert corpus_bleu([h.lower() for h in hypotheses], references, lowercase=True)[0] == pytest.approx(score)


def test_bleu_needs_one_reference_per_hypothesis():
    with pytest.raises(ValueError, match="one entry per hypothesis: got 2 hypotheses and 1 references"):
        corpus_bleu(["a b", "c d"], ["a b"])
