"""Generated digit-sequence tasks for sequence-to-sequence models: reverse, copy or sort a random string of
digits. No download; the classic first task for a Transformer, and the one whose attention is easy to read
(reversal attends along the anti-diagonal).

Token ids: 0 = padding, 1 = start, 2 = end, digits "0".."9" = 3..12.
"""

import numpy as np

PAD, START, END = 0, 1, 2
VOCABULARY = ["<pad>", "<s>", "</s>"] + [str(d) for d in range(10)]
VOCAB_SIZE = len(VOCABULARY)
TASKS = ("reverse", "copy", "sort")


def make_dataset(samples, max_digits, task="reverse", min_digits=1, seed=0):
    """Random digit strings and their transformed versions.

    Args:
        samples: number of pairs.
        max_digits: longest string; lengths are uniform in [min_digits, max_digits].
        task: "reverse", "copy" or "sort".
        min_digits: shortest string.
        seed: random seed.

    Returns:
        `(source, target)`: `(samples, max_digits)` ids, 0-padded; `(samples, max_digits + 2)` ids: start,
        the transformed digits, end, 0-padding. Train with `fit((source, target[:, :-1]), target[:, 1:])`.
    """
    if task not in TASKS:
        raise ValueError(f"`task` must be one of {list(TASKS)}. Received: task={task!r}")
    if not 1 <= min_digits <= max_digits:
        raise ValueError(f"Need 1 <= min_digits <= max_digits. Received: min_digits={min_digits}, max_digits={max_digits}")
    rng = np.random.default_rng(seed)
    source = np.zeros((samples, max_digits), "int32")
    target = np.zeros((samples, max_digits + 2), "int32")
    lengths = rng.integers(min_digits, max_digits + 1, size=samples)
    for row, length in enumerate(lengths):
        digits = rng.integers(3, VOCAB_SIZE, size=length)
        output = digits[::-1] if task == "reverse" else np.sort(digits) if task == "sort" else digits
        source[row, :length] = digits
        target[row, 0], target[row, 1 : length + 1], target[row, length + 1] = START, output, END
    return source, target


def decode(ids):
    """Token ids -> the digit string they spell, stopping at the end token and skipping start/padding."""
    text = []
    for token in np.asarray(ids).tolist():
        if token == END:
            break
        if token > END:
            text.append(VOCABULARY[token])
    return "".join(text)


def exact_match(generated, target):
    """Fraction of rows whose generated ids equal the target after the start token (end and padding included)."""
    expected = np.asarray(target)[:, 1:]
    generated = np.asarray(generated)[:, : expected.shape[1]]
    return float(np.mean(np.all(generated == expected, axis=1)))
