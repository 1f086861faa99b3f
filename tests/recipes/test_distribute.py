"""`--distribute`: two TensorFlow workers on this machine (training, one run folder, identical weights, resuming
after both were killed), JAX data parallelism over two host devices, and the errors for a backend that lacks
the strategy asked for."""

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import keras
import numpy as np
import pytest

from keras_tfm.data import digits
from recipes import common, devices, flags
from tests.helpers import epochs_in

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# One worker: `python -m recipes.reverse_digits ...` as `main`, plus a test callback that saves the final
# weights to argv[1] and, when argv[2] names a file, creates it after the first epoch (backed up and logged by
# then) and stands still there until the test kills the process.
WORKER = textwrap.dedent("""
    import sys, time
    import keras, numpy as np
    from recipes import reverse_digits

    weights_path, pause_marker = sys.argv[1], sys.argv[2]

    class TestHooks(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if pause_marker and epoch == 0:
                open(pause_marker, "w").close()
                time.sleep(600)

        def on_train_end(self, logs=None):
            np.savez(weights_path, *self.model.get_weights())

    sys.exit(0 if reverse_digits.main(sys.argv[3:], extra_callbacks=[TestHooks()]) else 1)
""")
TINY = ["--quick", "--no-attention-maps", "--train-samples", "128", "--test-samples", "8", "--max-digits", "4",
        "--batch-size", "32", "--distribute", "multiworker"]


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def start_workers(ports, output_dir, tmp_path, pause=False):
    """One process per worker, each with its TF_CONFIG; worker 0 is the chief."""
    workers = []
    for index in range(len(ports)):
        tf_config = {"cluster": {"worker": [f"127.0.0.1:{port}" for port in ports]},
                     "task": {"type": "worker", "index": index}}
        env = dict(os.environ, TF_CONFIG=json.dumps(tf_config), TF_CPP_MIN_LOG_LEVEL="3")
        marker = str(tmp_path / f"paused_{index}") if pause else ""
        command = [sys.executable, "-c", WORKER, str(tmp_path / f"weights_{index}.npz"), marker,
                   *TINY, "--output-dir", str(output_dir)]
        log = open(tmp_path / f"worker_{index}.log", "a")
        workers.append(subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT))
    return workers


def wait(workers, tmp_path, timeout=300):
    codes = [worker.wait(timeout=timeout) for worker in workers]
    logs = "\n".join((tmp_path / f"worker_{i}.log").read_text()[-3000:] for i in range(len(workers)))
    assert codes == [0] * len(workers), logs
    return logs


@pytest.mark.slow
@pytest.mark.tensorflow_only
def test_two_workers_killed_and_restarted_resume_at_the_interrupted_epoch_and_end_identical(tmp_path):
    """Two workers on 127.0.0.1 train one run; both are killed after epoch 1 is backed up, restarted with the same
    TF_CONFIG and folder, resume at epoch 2 and finish with one run folder and identical weights. (One test for
    both, to keep CI within its time: each start of two TensorFlow workers costs about half a minute.)"""
    ports, run = free_ports(2), tmp_path / "run"
    workers = start_workers(ports, run, tmp_path, pause=True)
    deadline = time.time() + 300
    while not all(os.path.exists(tmp_path / f"paused_{i}") for i in range(2)):
        assert time.time() < deadline and all(worker.poll() is None for worker in workers), \
            (tmp_path / "worker_0.log").read_text()[-3000:]
        time.sleep(0.5)
    for worker in reversed(workers):  # the non-chief first, then the chief
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    assert epochs_in(run) == [0] and os.path.isdir(tmp_path / "run.worker_1" / "backup")
    for index in range(2):
        (tmp_path / f"worker_{index}.log").write_text("")

    logs = wait(start_workers(ports, run, tmp_path), tmp_path)  # the same TF_CONFIG and folder
    assert "training on 2 replicas (multiworker)" in logs
    assert "Epoch 2/2" in logs and "Epoch 1/2" not in logs  # resumed at the interrupted epoch
    assert epochs_in(run) == [0, 1]  # each epoch logged once
    summary = json.loads((run / "summary.json").read_text())
    assert summary["flags"]["distribute"] == "multiworker"
    assert not (tmp_path / "run.worker_1").exists()  # the non-chief's own folder is gone; the chief's is the run
    chief, other = np.load(tmp_path / "weights_0.npz"), np.load(tmp_path / "weights_1.npz")
    assert len(chief.files) == len(other.files) > 10
    for name in chief.files:
        np.testing.assert_array_equal(chief[name], other[name])
    # The logged loss is the mean over the replicas, as on one device: at the start about ln(vocabulary).
    assert common.read_history(str(run))["loss"][0] < 1.5 * np.log(digits.VOCAB_SIZE)


# JAX: `--distribute data_parallel` over two host devices; XLA_FLAGS must be set before JAX is imported.
DATA_PARALLEL = textwrap.dedent("""
    import json, keras, numpy as np
    from recipes import devices
    from tests.helpers import reverse_digits, small_reverser

    source, target = reverse_digits(16, seed=0)
    results = {}
    for name in ("none", "data_parallel"):  # "none" first: data_parallel sets the global distribution
        keras.utils.set_random_seed(0)
        strategy = devices.distribution_strategy(name)
        with devices.strategy_scope(strategy):
            model = small_reverser()
            model.compile_for_training(optimizer=keras.optimizers.SGD(0.5))
        data = devices.fit_data(strategy, (source, target[:, :-1]), target[:, 1:], batch_size=16)
        history = model.fit(**data, epochs=1, shuffle=False, verbose=0)  # one step on the global batch of 16
        results[name] = {"loss": history.history["loss"][0],
                         "weights": [np.asarray(w).tolist() for w in model.get_weights()]}
    results["devices"] = len(keras.distribution.list_devices())
    results["mesh"] = list(strategy.device_mesh.shape)
    print("RESULT" + json.dumps(results))
""")


@pytest.mark.slow
def test_jax_data_parallel_step_on_two_devices_equals_one_device():
    pytest.importorskip("jax")
    env = dict(os.environ, KERAS_BACKEND="jax", XLA_FLAGS="--xla_force_host_platform_device_count=2",
               JAX_PLATFORMS="cpu")
    result = subprocess.run([sys.executable, "-c", DATA_PARALLEL], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads(result.stdout.split("RESULT")[-1])
    assert results["devices"] == 2 and results["mesh"] == [2]
    one, two = results["none"], results["data_parallel"]
    assert abs(one["loss"] - two["loss"]) <= 1e-5
    for a, b in zip(one["weights"], two["weights"], strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)
    assert max(np.abs(np.asarray(a)).max() for a in one["weights"]) > 0  # it trained a real model


@pytest.mark.parametrize("backend, name, fits", [
    ("jax", "mirrored", "--distribute data_parallel"),
    ("jax", "multiworker", "--distribute data_parallel"),
    ("torch", "mirrored", "use none"),
    ("torch", "data_parallel", "use none"),
    ("tensorflow", "data_parallel", "--distribute mirrored or multiworker"),
])
def test_a_strategy_the_backend_lacks_is_a_clear_error(monkeypatch, backend, name, fits):
    monkeypatch.setattr(keras.backend, "backend", lambda: backend)
    with pytest.raises(ValueError, match=f"--distribute {name}") as error:
        devices.distribution_strategy(name)
    assert f"the backend is {backend}" in str(error.value) and fits in str(error.value)


def test_an_unknown_strategy_is_a_clear_error():
    with pytest.raises(ValueError, match="`distribute` must be one of .*'data_parallel'.*Received: 'ring'"):
        devices.distribution_strategy("ring")


def test_a_non_chief_worker_writes_beside_the_run_and_finish_deletes_its_folder(tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    monkeypatch.setattr(devices, "_non_chief_worker", ("worker", 1))
    own = common.output_directory("reverse_digits", str(run))
    assert own == f"{run}.worker_1" and os.path.isdir(own) and not run.exists()
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    args = flags.recipe_parser("test", 1, 8, 1e-3).parse_args([])
    common.finish(model, own, args, {"loss": 1.0}, time.time())
    assert sorted(os.listdir(tmp_path)) == []  # the chief's folder is the run
    # A finished run stops every worker, the non-chief ones too.
    run.mkdir()
    (run / common.FINISHED).write_text("{}")
    with pytest.raises(SystemExit) as exit_info:
        common.output_directory("reverse_digits", str(run))
    assert exit_info.value.code == 0 and sorted(os.listdir(tmp_path)) == ["run"]


@pytest.mark.tensorflow_only
def test_fit_data_gives_arrays_without_a_strategy_and_sharded_global_batches_with_one():
    import tensorflow as tf

    x, y = np.arange(10, dtype="float32")[:, None], np.arange(10, dtype="float32")
    plain = devices.fit_data(None, x, y, 4, validation_data=(x, y), validation_batch_size=2)
    assert plain["x"] is x and plain["y"] is y and plain["batch_size"] == 4 and plain["validation_batch_size"] == 2
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    data = devices.fit_data(strategy, x, y, 4, validation_data=(x, y), seed=3)
    assert data["shuffle"] is False and set(data) == {"x", "shuffle", "validation_data"}
    for dataset, shuffled in ((data["x"], True), (data["validation_data"], False)):
        assert dataset.options().experimental_distribute.auto_shard_policy == tf.data.experimental.AutoShardPolicy.DATA
        batches = [batch_y.numpy() for _, batch_y in dataset]
        assert [len(b) for b in batches] == [4, 4, 2]  # global batches
        assert (sorted(np.concatenate(batches)) == y).all() and shuffled != (np.concatenate(batches) == y).all()
    pipeline = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
    assert devices.fit_data(None, pipeline) == {"x": pipeline, "shuffle": False}
