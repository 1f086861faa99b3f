"""CIFAR-10 as tf.data: where the images come from, and how they are augmented on the way to the model.

Two sources give the same thing, datasets of `(image uint8 (32, 32, 3), label int)` plus the class names:

    load_tfds(data_dir)          tensorflow-datasets "cifar10" (downloaded, or a prepared copy in `data_dir`)
    load_image_folder(path)      path/train/<class>/*.png|jpg and path/test/<class>/*.png|jpg

When neither can be had (no copy, no network), they raise `keras_tfm.data.DataUnavailable` with a
paragraph that says what was tried and how to provide the data; they never hang on a download.

The pipelines keep raw [0, 255] pixels: `keras_tfm.models.ViT` rescales them itself, so nothing here
normalises. Training batches get, in this order:

    cache -> shuffle -> pad 4 + random 32x32 crop + horizontal flip   (always, per image)
          -> RandAugment (optional, per image) -> batch -> resize (when image_size != 32)
          -> one-hot labels -> MixUp or CutMix (optional, per batch)

Validation: `holdout(train, 5000)` sets aside a stratified, seeded sample of the training images, so that the
choices made while training (which epoch, which flags) are made on them and the test images are scored once.

Labels are one-hot in every pipeline: label smoothing and MixUp/CutMix both need them, so train with
`keras.losses.CategoricalCrossentropy`.
"""

import os

import keras
import numpy as np
import tensorflow as tf

from keras_tfm.data import DataUnavailable, download_tfds, quiet_tfds_lookup

CLASS_NAMES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
IMAGE_SIZE = 32
# Where tensorflow-datasets downloads CIFAR-10 from; probed first so that an offline machine fails at once.
DOWNLOAD_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"

_HOW_TO_PROVIDE = (
    "To provide the data, either (1) on a machine with network access run "
    "`python -c \"import tensorflow_datasets as tfds; tfds.load('cifar10', data_dir='DIR')\"`, copy DIR here and "
    "pass it as `data_dir` (`--data-dir DIR` in the recipes); or (2) put the images in a folder PATH/train/<class>/ "
    "and PATH/test/<class>/ (PNG, JPEG, BMP or GIF, one sub-folder per class) and pass `--image-dir PATH`."
)


# --------------------------------------------------------------------------------------------------------------
# Loaders.


def load(data_dir=None, image_dir=None, download=True, seed=0, skip_unreadable=False):
    """`load_image_folder(image_dir)` when `image_dir` is given, else `load_tfds(data_dir, download)`."""
    if image_dir is not None:
        return load_image_folder(image_dir, seed=seed, skip_unreadable=skip_unreadable)
    return load_tfds(data_dir, download=download)


def load_tfds(data_dir=None, download=True):
    """CIFAR-10 from tensorflow-datasets.

    A prepared copy in `data_dir` (default: the tensorflow-datasets folder, `~/tensorflow_datasets`) is used as
    is. Without one, and with `download=True`, the download host is probed (a 5-second connection attempt) and
    only then the data set is downloaded and prepared into `data_dir`.

    Args:
        data_dir: tensorflow-datasets data folder, or None for its default.
        download: whether to download when no prepared copy is found.

    Returns:
        `(train, test, class_names)`: datasets of `(uint8 (32, 32, 3), int64 label)` (50,000 and 10,000
        images) and the ten class names.

    Raises:
        DataUnavailable: no prepared copy, and downloading is off or fails; or `data_dir` holds image folders
            (the message says to pass them as `image_dir`).
    """
    import tensorflow_datasets as tfds  # imported here: the image-folder path does not need it

    try:
        with quiet_tfds_lookup():
            return _tfds_splits(tfds, data_dir)
    except (AssertionError, FileNotFoundError):  # tfds asserts that the prepared files exist
        pass
    if data_dir is not None and _has_image_folder_layout(data_dir):  # image folders, given as the wrong folder
        raise DataUnavailable(
            f"CIFAR-10: {data_dir} holds image folders (train/<class>/ and test/<class>/), not a tensorflow-datasets "
            "copy: pass it as `image_dir` (`--image-dir` in the recipes), not `data_dir` (`--data-dir`)."
        )
    with quiet_tfds_lookup():
        where = tfds.builder("cifar10", data_dir=data_dir).data_dir
    tried = f"Looked for a prepared tensorflow-datasets copy of CIFAR-10 in {where} and found none"
    if not download:
        raise DataUnavailable(
            f"CIFAR-10 is not available. {tried}; downloading into that folder was not requested (`download=True`, "
            f"`--download` in the recipes, would try it). {_HOW_TO_PROVIDE}"
        )
    problem = download_tfds("cifar10", data_dir, DOWNLOAD_URL)  # checks the host first: offline fails at once
    if problem is None:
        return _tfds_splits(tfds, data_dir)
    raise DataUnavailable(
        f"CIFAR-10 is not available. {tried}, and downloading it from {DOWNLOAD_URL} failed ({problem}). "
        f"{_HOW_TO_PROVIDE}"
    )


def _has_image_folder_layout(folder):
    """`folder/train` and `folder/test` each hold class folders (what `load_image_folder` reads)."""
    splits = [os.path.join(folder, split) for split in ("train", "test")]
    return all(os.path.isdir(split) and _class_folders(split) for split in splits)


def _class_folders(folder):
    """The names of the sub-folders of `folder` (one per class), sorted."""
    return sorted(name for name in os.listdir(folder) if os.path.isdir(os.path.join(folder, name)))


def _tfds_splits(tfds, data_dir):
    train, test = tfds.load("cifar10", split=["train", "test"], data_dir=data_dir, download=False, as_supervised=True)
    return train, test, list(CLASS_NAMES)  # tfds numbers the classes in this order


IMAGE_FORMATS = (".png", ".jpg", ".jpeg", ".bmp", ".gif")  # what tf.io.decode_image reads


def load_image_folder(path, seed=0, skip_unreadable=False):
    """CIFAR-10 (or any 10-class, 32x32 data set) from image files: `path/{train,test}/<class>/*.png|jpg|...`.

    Class names are the sub-folder names in alphabetical order (for CIFAR-10 that is the usual order); the test
    folder must have the same ones. Files are PNG, JPEG, BMP or GIF (by extension, in sub-folders too); images
    of another size are resized to 32x32. The file order is shuffled once with `seed`, so `dataset.take(n)` is a
    sample of every class.

    Every file is checked before training starts (its first and last bytes: a PNG's signature and end chunk, a
    JPEG's start and end markers, ...), so that a corrupt or truncated image is named here instead of failing
    deep inside `fit` as "Unknown image file format".

    Args:
        path: the folder holding `train/` and `test/`.
        seed: the shuffle of the file order.
        skip_unreadable: leave out files that fail the check (the count is printed) instead of raising.

    Returns:
        `(train, test, class_names)`: datasets of `(uint8 (32, 32, 3), int32 label)`, and the class names.

    Raises:
        DataUnavailable: `path/train` or `path/test` is missing, holds no images, has other classes than the
            other, or holds an unreadable file (unless `skip_unreadable`).
    """
    folders = {split: os.path.join(path, split) for split in ("train", "test")}
    missing = [folder for folder in folders.values() if not os.path.isdir(folder)]
    if missing:
        raise DataUnavailable(
            f"No CIFAR-10 image folder at {path}: {' and '.join(missing)} missing. Expected "
            f"{path}/train/<class>/*.png and {path}/test/<class>/*.png (or .jpg, .jpeg, .bmp, .gif). {_HOW_TO_PROVIDE}"
        )
    class_names, test_classes = _class_folders(folders["train"]), _class_folders(folders["test"])
    if test_classes != class_names:
        raise DataUnavailable(f"The class folders of {folders['test']} ({test_classes}) differ from those of "
                              f"{folders['train']} ({class_names}). {_HOW_TO_PROVIDE}")
    splits = []
    for folder in folders.values():
        files, labels = _image_files(folder, class_names)
        if not files:
            raise DataUnavailable(f"Cannot read the CIFAR-10 images in {folder}: no {'/'.join(IMAGE_FORMATS)} files "
                                  f"in its class folders. {_HOW_TO_PROVIDE}")
        bad = [file for file in files if not _looks_whole(file)]
        if bad and not skip_unreadable:
            shown = ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
            raise DataUnavailable(f"{len(bad)} of the {len(files)} image files in {folder} are not readable images "
                                  f"(corrupt, truncated or of another format than their extension): {shown}. "
                                  "Replace or remove them, or pass `skip_unreadable=True` (`--skip-bad-images` in the "
                                  "recipes) to train without them.")
        if bad:
            print(f"skipping {len(bad)} unreadable image file{'s' * (len(bad) != 1)} in {folder} (first: {bad[0]})")
            unreadable = set(bad)
            keep = [i for i, file in enumerate(files) if file not in unreadable]
            files, labels = [files[i] for i in keep], [labels[i] for i in keep]
        order = np.random.RandomState(seed).permutation(len(files))
        splits.append(_decoded(np.asarray(files)[order], np.asarray(labels, "int32")[order]))
    return splits[0], splits[1], class_names


def _image_files(folder, class_names):
    """Image paths below `folder/<class>/` (sorted) and their labels (the class's index in `class_names`)."""
    files, labels = [], []
    for label, name in enumerate(class_names):
        for root, _, names in sorted(os.walk(os.path.join(folder, name))):
            found = sorted(n for n in names if n.lower().endswith(IMAGE_FORMATS))
            files += [os.path.join(root, n) for n in found]
            labels += [label] * len(found)
    return files, labels


# (how a whole file of the format starts, how it ends: None = no fixed end)
_SIGNATURES = {".png": (b"\x89PNG\r\n\x1a\n", b"IEND\xaeB`\x82"), ".jpg": (b"\xff\xd8", b"\xff\xd9"),
               ".jpeg": (b"\xff\xd8", b"\xff\xd9"), ".bmp": (b"BM", None), ".gif": (b"GIF8", b";")}


def _looks_whole(file):
    """True if `file` starts (and ends) as a file of the format its extension names: a cheap check (a few bytes
    read at each end) that catches corrupt, truncated and mislabelled files."""
    start, end = _SIGNATURES[os.path.splitext(file)[1].lower()]
    try:
        with open(file, "rb") as handle:
            head = handle.read(len(start))
            if end is None:
                return head == start
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(size - len(end) - 32, 0))  # a few bytes of padding after the end marker are common
            tail = handle.read()
    except OSError:
        return False
    return head == start and end in tail


def _decoded(files, labels):
    def read(file, label):
        image = tf.io.decode_image(tf.io.read_file(file), channels=3, expand_animations=False)
        image = tf.image.resize(tf.cast(image, "float32"), (IMAGE_SIZE, IMAGE_SIZE))  # bilinear, as Keras' loader
        return tf.cast(tf.clip_by_value(tf.round(image), 0, 255), tf.uint8), label

    return tf.data.Dataset.from_tensor_slices((files, labels)).map(read, num_parallel_calls=tf.data.AUTOTUNE)


def num_examples(dataset):
    """Number of elements of a dataset (counted by iterating when tf.data does not know it)."""
    count = int(dataset.cardinality())
    if count >= 0:
        return count
    return int(dataset.reduce(0, lambda total, _: total + 1))


def to_arrays(dataset):
    """All `(image, label)` pairs of a dataset as NumPy: uint8 `(n, H, W, C)` images and int32 `(n,)` labels."""
    images, labels = [], []
    for image_batch, label_batch in dataset.batch(1024):
        images.append(image_batch.numpy())
        labels.append(label_batch.numpy())
    return np.concatenate(images), np.concatenate(labels).astype("int32")


def holdout(dataset, validation_images, seed=0):
    """Sets `validation_images` training images aside for validation, the same share of every class.

    The images are drawn with a fixed `seed`, so a run and its rerun validate on the same images; neither the
    training part nor the validation part is in class order.

    Args:
        dataset: `(image, label)` pairs, e.g. the `train` of `load`.
        validation_images: how many to hold out, in [0, number of images).
        seed: seed of the draw.

    Returns:
        `(train, (images, labels))`: a dataset of the remaining pairs, and the held-out NumPy arrays (uint8
        images, int32 labels) for `evaluation_pipeline`.

    Raises:
        ValueError: `validation_images` leaves no training image (or is negative).
    """
    images, labels = to_arrays(dataset)
    if isinstance(validation_images, bool) or not isinstance(validation_images, (int, np.integer)) or not (
            0 <= validation_images < len(labels)):
        raise ValueError(
            f"`validation_images` must be an integer in [0, {len(labels)}): the data set has {len(labels)} training "
            f"images and some must be left to train on. Received: validation_images={validation_images!r}"
        )
    order = np.random.default_rng(seed).permutation(len(labels))
    by_class = order[np.argsort(labels[order], kind="stable")]  # class after class, each in random order
    # Evenly spaced picks through the classes give each class its share (to within one image).
    picked = by_class[np.linspace(0, len(labels), validation_images, endpoint=False).astype(int)]
    held = np.zeros(len(labels), bool)
    held[picked] = True
    kept, validation = order[~held[order]], order[held[order]]  # both in the random order
    train = tf.data.Dataset.from_tensor_slices((images[kept], labels[kept]))
    return train, (images[validation], labels[validation])


# --------------------------------------------------------------------------------------------------------------
# Pipelines.


def resize(images, image_size):
    """Float32 images resized (bilinear) to `image_size` x `image_size`; unchanged size is only cast."""
    images = tf.cast(images, tf.float32)
    if images.shape[-3] == images.shape[-2] == image_size:
        return images
    return tf.image.resize(images, (image_size, image_size))  # (batch, image_size, image_size, channels)


def pad_crop_flip(image, padding=4):
    """The standard CIFAR augmentation of one image: zero-pad by `padding` pixels, take a random crop of the
    original size, and flip left-right with probability 1/2."""
    height, width, channels = image.shape
    padded = tf.image.resize_with_crop_or_pad(image, height + 2 * padding, width + 2 * padding)
    cropped = tf.image.random_crop(padded, (height, width, channels))
    return tf.image.random_flip_left_right(cropped)


def training_pipeline(
    dataset, batch_size, num_classes=10, image_size=IMAGE_SIZE, randaugment=0.0, mixup=0.0, cutmix=0.0,
    seed=0, shuffle_buffer=50_000,
):
    """Augmented, batched training data with one-hot labels (see the module docstring for the order).

    Args:
        dataset: `(uint8 image, int label)` pairs, e.g. the `train` of `load_tfds`.
        batch_size: images per batch (the last batch may be smaller).
        num_classes: length of the one-hot labels.
        image_size: the size the model takes; images are resized after augmentation when it is not 32.
        randaugment: 0 for none, else the strength (`factor`, 0-1) of `keras.layers.RandAugment` with two
            operations per image.
        mixup: 0 for none, else `alpha` of `keras.layers.MixUp`.
        cutmix: 0 for none, else `factor` of `keras.layers.CutMix`. With both MixUp and CutMix each batch gets
            one of the two, chosen at random.
        seed: shuffling seed.
        shuffle_buffer: shuffle buffer size (the whole of CIFAR-10's training set by default).

    Returns:
        A dataset of `(float32 (batch, image_size, image_size, 3) in [0, 255], float32 (batch, num_classes))`.
    """
    autotune = tf.data.AUTOTUNE
    # Decoded uint8 images are cached in memory (150 MB for CIFAR-10), so files are read in the first epoch only.
    data = dataset.cache().shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    data = data.map(lambda image, label: (pad_crop_flip(image), label), num_parallel_calls=autotune)
    if randaugment:
        # Per image, so that every image gets its own two operations (on a batch, all would share them).
        # float32 layers: the model's mixed-precision policy must not reach the input pipeline.
        rand_augment = keras.layers.RandAugment(value_range=(0, 255), factor=randaugment, dtype="float32")
        data = data.map(lambda image, label: (rand_augment(tf.cast(image, tf.float32)), label),
                        num_parallel_calls=autotune)
    data = data.batch(batch_size)
    data = data.map(lambda images, labels: (resize(images, image_size), tf.one_hot(labels, num_classes)),
                    num_parallel_calls=autotune)
    mixers = []
    if mixup:
        mixers.append(keras.layers.MixUp(alpha=mixup, dtype="float32", seed=seed))
    if cutmix:
        mixers.append(keras.layers.CutMix(factor=cutmix, dtype="float32", seed=seed))
    if mixers:
        data = data.map(lambda images, labels: _mix(mixers, images, labels), num_parallel_calls=autotune)
    return data.prefetch(autotune)


def _mix(mixers, images, labels):
    """One of the mixing layers, picked at random per batch, applied to images and one-hot labels together."""
    outputs = [mixer({"images": images, "labels": labels}, training=True) for mixer in mixers]
    if len(outputs) == 1:
        return outputs[0]["images"], outputs[0]["labels"]
    first = tf.random.uniform(()) < 0.5  # computing both and keeping one is cheap next to a training step
    return (tf.where(first, outputs[0]["images"], outputs[1]["images"]),
            tf.where(first, outputs[0]["labels"], outputs[1]["labels"]))


def evaluation_pipeline(images, labels, batch_size, num_classes=10, image_size=IMAGE_SIZE):
    """Batches of `(float32 images resized to image_size, one-hot labels)` from NumPy arrays, in order."""
    data = tf.data.Dataset.from_tensor_slices((images, labels)).batch(batch_size)
    data = data.map(lambda x, y: (resize(x, image_size), tf.one_hot(y, num_classes)))
    return data.prefetch(tf.data.AUTOTUNE)
