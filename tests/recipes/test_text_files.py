"""Texts read from files for `imdb_classifier --predict RUN_DIR --input ...`, and the CSV written: every input
keeps its row, and the ones that cannot be classified say why (plain Python, no model)."""

import csv
import io

import pytest

from recipes import text_files


def test_lines_csv_rows_folders_and_stdin_keep_their_order_and_sources(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"Great film.\n\n   \ncaf\xe9 noir\r\nDull.")
    (tmp_path / "b.csv").write_text('id,review\n1,"Long, ""quoted"" text"\n2,\n3,"two\nlines"\n', encoding="utf-8")
    (tmp_path / "pos").mkdir()
    (tmp_path / "pos" / "2_9.txt").write_text("Second<br />file.", encoding="utf-8")
    (tmp_path / "pos" / "1_8.txt").write_text("First\n file.", encoding="utf-8")
    (tmp_path / "pos" / "notes.md").write_text("not a text", encoding="utf-8")
    texts = text_files.read_texts([str(tmp_path / "a.txt"), str(tmp_path / "b.csv"), str(tmp_path / "pos"), "-"],
                                  text_column="review", stdin=io.BytesIO(b"\xef\xbb\xbfFrom stdin.\n"))
    assert [(t.source, t.text, t.problem) for t in texts] == [
        (f"{tmp_path}/a.txt:1", "Great film.", None),
        (f"{tmp_path}/a.txt:2", "", "empty"),
        (f"{tmp_path}/a.txt:3", "   ", "empty"),
        (f"{tmp_path}/a.txt:4", "caf\ufffd noir", "encoding"),  # named, not guessed at
        (f"{tmp_path}/a.txt:5", "Dull.", None),
        (f"{tmp_path}/b.csv:2", 'Long, "quoted" text', None),
        (f"{tmp_path}/b.csv:3", "", "empty"),
        (f"{tmp_path}/b.csv:5", "two\nlines", None),  # the row ends on line 5
        (f"{tmp_path}/pos/1_8.txt", "First file.", None),
        (f"{tmp_path}/pos/2_9.txt", "Second<br />file.", None),
        ("stdin:1", "From stdin.", None),  # the byte-order mark dropped
    ]


@pytest.mark.parametrize("setup, message", [
    (lambda tmp: tmp / "missing.txt", "missing.txt: no such file or folder"),
    (lambda tmp: (tmp / "empty").mkdir() or tmp / "empty", "the folder holds no .txt files"),
    (lambda tmp: (tmp / "x.csv").write_text("id,body\n1,a\n") and tmp / "x.csv",
     r"no column 'text' \(--text-column\); its header has \['id', 'body'\]"),
    (lambda tmp: (tmp / "y.csv").write_bytes(b"text\n\xff\n") and tmp / "y.csv", "y.csv: the file is not UTF-8 text"),
])
def test_inputs_that_cannot_be_read_are_named(tmp_path, setup, message):
    with pytest.raises(ValueError, match=message):
        text_files.read_texts([str(setup(tmp_path))])


def test_the_csv_has_a_row_per_input_with_the_label_the_probabilities_or_the_problem(tmp_path):
    texts = [text_files.Text("a:1", "good"), text_files.Text("a:2", ""), text_files.Text("a:3", "bad")]
    path = tmp_path / "out.csv"
    text_files.write_predictions(path, texts, [[0.25, 0.75], [0.9, 0.1]], ["negative", "positive"])
    assert list(csv.DictReader(open(path))) == [
        {"source": "a:1", "label": "positive", "p_negative": "0.250000", "p_positive": "0.750000", "problem": ""},
        {"source": "a:2", "label": "", "p_negative": "", "p_positive": "", "problem": "empty (no non-blank character)"},
        {"source": "a:3", "label": "negative", "p_negative": "0.900000", "p_positive": "0.100000", "problem": ""},
    ]
