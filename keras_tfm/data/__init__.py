"""Data sets for the recipes: generated digit tasks, CIFAR-10, IMDB and translation loaders (tensorflow-datasets or local
folders). Loaders raise `keras_tfm.training.DataUnavailable` with instructions when the data cannot be had."""
