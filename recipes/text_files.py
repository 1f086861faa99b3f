"""Texts to classify, read from files, and their predictions written as CSV: `imdb_classifier --predict RUN_DIR
--input PATH ...` (plain Python).

    a .txt file        one text per line
    a .csv file        one text per row, from the column `--text-column` (default "text"; a header row is required)
    a folder           every .txt file under it is one text (the aclImdb layout: train/pos/123_9.txt ...)
    -                  standard input, one text per line

Every input keeps its place: a line that cannot be classified (empty, or not UTF-8) becomes a row whose `problem`
column says why, and the recipe names such lines at the end. Nothing is skipped silently.
"""

import csv
import io
import os
import sys

from keras_tfm import files

PROBLEMS = {"empty": "empty (no non-blank character)", "encoding": "not UTF-8 text"}


class Text:
    """One input: where it came from (`source`, e.g. "reviews.txt:7"), its text, and a problem (a key of
    `PROBLEMS`) where it cannot be classified."""

    def __init__(self, source, text, problem=None):
        self.source, self.text = source, text
        self.problem = problem if problem or text.strip() else "empty"


def read_texts(paths, text_column="text", stdin=None):
    """The `Text`s of every path in `paths`, in order. Raises `ValueError` naming a path that does not exist, a
    folder without .txt files, or a CSV without `text_column`."""
    texts = []
    for path in paths:
        if path == "-":
            texts += _lines((stdin or sys.stdin.buffer).read(), "stdin")
        elif os.path.isdir(path):
            found = sorted(os.path.join(folder, name) for folder, _, names in os.walk(path)
                           for name in names if name.endswith(".txt"))
            if not found:
                raise ValueError(f"--input {path}: the folder holds no .txt files (each would be one text)")
            for file in found:
                texts.append(_whole_file(file))
        elif not os.path.isfile(path):
            raise ValueError(f"--input {path}: no such file or folder")
        elif path.lower().endswith(".csv"):
            texts += _csv_rows(path, text_column)
        else:
            with open(path, "rb") as file:
                texts += _lines(file.read(), path)
    return texts


def _decoded(data):
    try:
        return data.decode("utf-8-sig"), None
    except UnicodeDecodeError:
        return data.decode("utf-8", errors="replace"), "encoding"


def _lines(data, name):
    texts = []
    for number, line in enumerate(data.splitlines(), start=1):
        text, problem = _decoded(line)
        texts.append(Text(f"{name}:{number}", text, problem))
    return texts


def _whole_file(path):
    with open(path, "rb") as file:
        text, problem = _decoded(file.read())
    return Text(path, " ".join(text.split()), problem)


def _csv_rows(path, column):
    with open(path, "rb") as file:
        text, problem = _decoded(file.read())
    if problem:
        raise ValueError(f"--input {path}: the file is not UTF-8 text")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    if column not in (reader.fieldnames or []):
        raise ValueError(f"--input {path}: no column {column!r} (--text-column); its header has "
                         f"{reader.fieldnames or 'nothing'}")
    # A row's source is its line in the file: the header is line 1 (a row spanning lines: its last).
    return [Text(f"{path}:{reader.line_num}", row[column] or "") for row in reader]


def write_predictions(path, texts, probabilities, class_names):
    """Writes `path` (CSV): source, label, one probability column per class, problem; one row per input in
    order, the classified ones taking `probabilities` rows in turn; whole or not at all (`keras_tfm.files`)."""
    rows = iter(probabilities)
    table = io.StringIO()
    writer = csv.writer(table, lineterminator="\n")
    writer.writerow(["source", "label", *(f"p_{name}" for name in class_names), "problem"])
    for item in texts:
        if item.problem:
            writer.writerow([item.source, "", *([""] * len(class_names)), PROBLEMS[item.problem]])
            continue
        row = next(rows)
        best = max(range(len(class_names)), key=lambda k: row[k])
        writer.writerow([item.source, class_names[best], *(f"{p:.6f}" for p in row), ""])
    files.write_text(path, table.getvalue())  # whole or not at all
