"""Data sets for the recipes: generated digit tasks, CIFAR-10, IMDB and translation loaders (tensorflow-datasets or local
folders). Loaders raise `DataUnavailable` with instructions when the data cannot be had."""


class DataUnavailable(RuntimeError):
    """Raised by a data loader that cannot find or download its data set; the message says what it tried and
    how to provide the data. Recipes print it and exit with status 2 instead of showing a traceback."""


def first_line(error):
    """The first line of an exception's message (a loader's own exceptions can be pages long)."""
    text = str(error).strip()
    return text.splitlines()[0].rstrip(".") if text else "(no message)"


__all__ = ["DataUnavailable", "first_line"]
