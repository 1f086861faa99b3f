"""Small generated data sets in the layouts the data loaders read (for tests/data and tests/recipes)."""

import gzip
import os

import keras
import numpy as np

from keras_tfm.data import cifar10

POSITIVE = ["great", "wonderful", "loved", "brilliant", "superb", "moving"]
NEGATIVE = ["awful", "boring", "hated", "terrible", "dull", "waste"]
NEUTRAL = ["the", "film", "movie", "plot", "actors", "story", "was", "and", "a", "it"]


ONLY_UNLABELLED, ONLY_TEST = "zeppelin", "quixotic"  # words that appear in one part of the folder only


def write_acl_imdb(root, per_class=16, seed=0, unsup=0, beyond_ascii=False):
    """A tiny folder with the aclImdb layout: {train,test}/{pos,neg}/*.txt, short reviews whose sentiment words
    give the label away (with the `<br />` tags and punctuation of the real reviews); with `unsup`, that many
    unlabelled reviews in train/unsup/. Every unlabelled review says ONLY_UNLABELLED and every test review
    ONLY_TEST, so a test can tell which text a vocabulary was learned from. `beyond_ascii` ends every review with
    characters of the real files beyond ASCII (a "\\x97" dash, as some reviews have, and an accent)."""
    rng = np.random.default_rng(seed)
    if unsup:
        os.makedirs(root / "train" / "unsup")
        for i in range(unsup):
            words = list(rng.choice(NEUTRAL + POSITIVE + NEGATIVE, 10)) + [ONLY_UNLABELLED] * 3
            (root / "train" / "unsup" / f"{i}_0.txt").write_text(" ".join(words).capitalize() + ".")
    for split in ("train", "test"):
        for label, words in (("pos", POSITIVE), ("neg", NEGATIVE)):
            os.makedirs(root / split / label)
            for i in range(per_class):
                review = list(rng.choice(NEUTRAL, 8)) + list(rng.choice(words, 3))
                rng.shuffle(review)
                if split == "test":
                    review += [ONLY_TEST] * 3
                text = " ".join(review[:6]).capitalize() + ".<br /><br />" + " ".join(review[6:]) + "!"
                text += " \x97 café" if beyond_ascii else ""
                (root / split / label / f"{i}_{rng.integers(1, 11)}.txt").write_text(text)
    return root


def write_image_folder(root, train_per_class=3, test_per_class=2):
    """root/{train,test}/<class>/*.png with random 32x32 images of a class-dependent tint."""
    rng = np.random.default_rng(0)
    for split, count in (("train", train_per_class), ("test", test_per_class)):
        for label, name in enumerate(cifar10.CLASS_NAMES):
            os.makedirs(root / split / name)
            for i in range(count):
                pixels = rng.integers(0, 128, (32, 32, 3)) + 12 * label
                keras.utils.save_img(root / split / name / f"{i}.png", pixels.astype("uint8"))
    return root


# A made-up language pair: every English word has one "German" word, and adjectives follow their noun.
WORDS = {"a": "ein", "the": "der", "big": "gross", "small": "klein", "red": "rot", "dog": "Hund", "cat": "Katze",
         "man": "Mann", "runs": "rennt", "sleeps": "schläft", "eats": "isst", "fast": "schnell"}


def make_corpus(samples, seed):
    rng = np.random.default_rng(seed)
    source, target = [], []
    for _ in range(samples):
        article, adjective, noun = rng.choice(["a", "the"]), rng.choice(["big", "small", "red"]), rng.choice(["dog", "cat", "man"])
        verb = rng.choice(["runs", "sleeps", "eats"])
        english = [article, adjective, noun, verb] + (["fast"] if rng.random() < 0.5 else [])
        german = [WORDS[article], WORDS[noun], WORDS[adjective]] + [WORDS[w] for w in english[3:]]
        source.append(" ".join(english).capitalize() + ".")
        target.append(" ".join(german).capitalize() + ".")
    return source, target


def write(path, lines):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as file:
        file.writelines(line + "\n" for line in lines)
    return str(path)


def write_multi30k_folder(folder):
    """A Multi30k-layout folder (train .gz, val and test_2016_flickr plain) of generated pairs; returns
    {split: (english path, german path)}."""
    paths = {}
    for split, stem, samples in (("train", "train", 600), ("validation", "val", 40), ("test", "test_2016_flickr", 20)):
        source, target = make_corpus(samples, seed=len(stem))
        suffix = ".gz" if split == "train" else ""  # both kinds of file
        paths[split] = (write(folder / f"{stem}.en{suffix}", source), write(folder / f"{stem}.de{suffix}", target))
    return paths
