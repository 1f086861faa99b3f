"""Where a recipe trains: the devices it computes on, and `--distribute` (a `tf.distribute` strategy, or JAX's
data parallelism) with the data feeding that goes with it (`fit_data`: arrays, or `tf.data` pipelines of global
batches split over the replicas).

With `--distribute multiworker` every worker runs the same command (TF_CONFIG tells each one its part) and
trains on its share of every global batch; only the chief writes the run folder (`recipes.common`).
"""

import sys
from contextlib import nullcontext

import keras

from keras_tfm.distribute import MultiWorkerMirroredStrategy
from recipes.flags import DISTRIBUTE


def hide_gpus_from_tensorflow():
    """On JAX and PyTorch, TensorFlow only runs the `tf.data` input pipelines, on the CPU. A TensorFlow that sees
    a GPU reserves most of its memory at its first operation, taking it from the backend that trains. `setup`
    calls it first; importing this module changes nothing."""
    if keras.backend.backend() == "tensorflow" or "tensorflow" not in sys.modules:
        return
    import tensorflow as tf

    try:
        tf.config.set_visible_devices([], "GPU")
    except RuntimeError:  # TensorFlow already started its devices (it was used before `setup`)
        print("warning: TensorFlow already holds the GPUs; call recipes.common.setup before using tf.data",
              file=sys.stderr)


# Set by `distribution_strategy`: this process's (task type, index) when it is a worker of a multi-worker
# cluster other than the chief, else None. `recipes.common`'s run folder reads it (`non_chief_worker`).
_non_chief_worker = None


def non_chief_worker():
    """This process's (task type, index) when it is a multi-worker cluster's worker other than the chief, else
    None (set by `distribution_strategy`)."""
    return _non_chief_worker


def distribution_strategy(name):
    """What `--distribute` asks for: None for "none"; a `tf.distribute` strategy for "mirrored" and
    "multiworker" (TensorFlow backend); for "data_parallel" (JAX backend), `keras.distribution.DataParallel`
    over the local devices, made the global distribution. Another backend gets a ValueError naming the flag
    that fits it."""
    global _non_chief_worker
    if name not in DISTRIBUTE:
        raise ValueError(f"`distribute` must be one of {list(DISTRIBUTE)}. Received: {name!r}")
    _non_chief_worker = None
    if name == "none":
        return None
    backend = keras.backend.backend()
    wanted = "jax" if name == "data_parallel" else "tensorflow"
    if backend != wanted:
        fits = {"jax": "--distribute data_parallel", "tensorflow": "--distribute mirrored or multiworker"}
        instead = f"; on {backend} use {fits[backend]}" if backend in fits else f"; {backend} has none, use none"
        raise ValueError(f"`--distribute {name}` needs KERAS_BACKEND={wanted}, but the backend is {backend}{instead}.")
    if name == "data_parallel":
        distribution = keras.distribution.DataParallel(devices=keras.distribution.list_devices())
        keras.distribution.set_distribution(distribution)
        return distribution
    import tensorflow as tf

    if name == "mirrored":
        # All local GPUs; on a machine without GPUs, every (logical) CPU device, so the strategy can be tried
        # on a laptop with `tf.config.set_logical_device_configuration`.
        devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
        return tf.distribute.MirroredStrategy([device.name for device in devices])
    # TensorFlow's, with the reductions Keras 3 needs (keras_tfm.distribute); the cluster comes from TF_CONFIG.
    strategy = MultiWorkerMirroredStrategy()
    if not strategy.extended.should_checkpoint:  # the chief (or worker 0 without one) alone keeps the run
        resolver = strategy.cluster_resolver
        _non_chief_worker = (resolver.task_type, resolver.task_id)
    return strategy


def is_tf_distribute(strategy):
    """True for a `tf.distribute` strategy (`--distribute mirrored` or `multiworker`)."""
    return strategy is not None and not isinstance(strategy, keras.distribution.DataParallel)


def sharded(dataset, strategy):
    """`dataset` (a `tf.data` pipeline of global batches) set to be split by data under a `tf.distribute`
    strategy: every worker reads the same batches and keeps its replicas' share of each (`DATA` auto-sharding;
    the default would try to split by input file first). Without a strategy, `dataset` as it is."""
    if not is_tf_distribute(strategy):
        return dataset
    import tensorflow as tf

    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return dataset.with_options(options)


def fit_data(strategy, x, y=None, batch_size=None, validation_data=None, validation_batch_size=None, seed=0,
             epochs=None, first_epoch=0):
    """The data keyword arguments of `model.fit`. `x` (and `y`) and `validation_data` are in-memory arrays, or
    `tf.data` pipelines of global batches (no `y`; they shuffle themselves, hence `shuffle=False`).

    Without a `tf.distribute` strategy, arrays go to `fit` as they are, with `batch_size` (and
    `validation_batch_size`): `fit` shuffles and batches them. With one, they become `tf.data` pipelines of
    global batches of that size (Keras splits each over the replicas), the training one shuffled with `seed`,
    in the same order on every worker. Every pipeline is `sharded`.

    With `epochs` (and no strategy), the training arrays become one `tf.data` pipeline instead, whose order in
    each epoch depends on `seed` and the epoch's number alone, from `first_epoch` (the epochs a resumed run
    restored: `runs.finished_epochs`) to `epochs`: a run resumed after a crash then sees the batches an
    uninterrupted run sees, and ends with the same weights (`steps_per_epoch` is in the result).
    """
    distributed = is_tf_distribute(strategy)
    if y is None:
        data = {"x": sharded(x, strategy), "shuffle": False}
    elif distributed:
        data = {"x": _global_batches(strategy, x, y, batch_size, shuffle_seed=seed), "shuffle": False}
    elif epochs is not None:
        data = {"x": _epoch_keyed_batches(x, y, batch_size, seed, first_epoch, epochs), "shuffle": False,
                "steps_per_epoch": -(-len(y) // batch_size)}
    else:
        data = {"x": x, "y": y, "batch_size": batch_size}
    if validation_data is None:
        return data
    if not isinstance(validation_data, (tuple, list)):
        data["validation_data"] = sharded(validation_data, strategy)
    elif distributed:
        data["validation_data"] = _global_batches(strategy, *validation_data, validation_batch_size or batch_size)
    else:
        data.update(validation_data=validation_data, validation_batch_size=validation_batch_size)
    return data


def _epoch_keyed_batches(x, y, batch_size, seed, first_epoch, epochs):
    """Epochs `first_epoch` to `epochs` of `(x, y)` in batches, each epoch in an order drawn from `seed` and its
    number by a stateless shuffle (not from a random state that a new process starts again)."""
    import tensorflow as tf

    arrays = tf.nest.map_structure(tf.constant, (x, y))
    count = len(y)

    def epoch(number):
        order = tf.random.experimental.stateless_shuffle(tf.range(count, dtype=tf.int64),
                                                         seed=tf.stack([tf.constant(seed, tf.int64), number]))
        batches = tf.data.Dataset.from_tensor_slices(order).batch(batch_size)
        return batches.map(lambda rows: tf.nest.map_structure(lambda a: tf.gather(a, rows), arrays))

    numbers = tf.data.Dataset.range(first_epoch, max(epochs, first_epoch + 1))
    return numbers.flat_map(epoch).prefetch(tf.data.AUTOTUNE)


def _global_batches(strategy, x, y, batch_size, shuffle_seed=None):
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensor_slices((x, y))
    if shuffle_seed is not None:
        dataset = dataset.shuffle(len(y), seed=shuffle_seed, reshuffle_each_iteration=True)
    return sharded(dataset.batch(batch_size).prefetch(tf.data.AUTOTUNE), strategy)


def strategy_scope(strategy):
    """`strategy.scope()`, or a do-nothing context without a strategy."""
    return strategy.scope() if strategy is not None else nullcontext()


def training_devices():
    """The devices the backend computes on, as names (`["cpu:0"]`, `["cuda:0", "cuda:1"]`): a missing CUDA then
    shows at the start of a run instead of as a slow run."""
    backend = keras.backend.backend()
    if backend == "torch":
        import torch

        gpus = [f"cuda:{i} ({torch.cuda.get_device_name(i)})" for i in range(torch.cuda.device_count())]
        return gpus or [f"cpu ({torch.get_num_threads()} threads)"]
    if backend == "jax":
        import jax

        return [f"{d.platform}:{d.id}" + (f" ({d.device_kind})" if d.platform != "cpu" else "") for d in jax.devices()]
    if backend == "tensorflow":
        import tensorflow as tf

        gpus = tf.config.list_logical_devices("GPU")
        return [d.name for d in gpus] or [d.name for d in tf.config.list_logical_devices("CPU")]
    return [backend]


def on_gpu():
    """True when the backend computes on a GPU."""
    return not training_devices()[0].startswith(("cpu", "/device:CPU"))
