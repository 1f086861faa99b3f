import os

# Quieter logs; must be set before TensorFlow is imported.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("MPLBACKEND", "Agg")  # headless: no display in CI
# JAX compiles every new operation and shape with XLA, and a test runs most programs once or twice: XLA's
# optimization passes cost more than they save. Without them (JAX's own switch, kept if the user set it) the JAX
# backend's model tests took 114 s instead of 206 s on 2 AMD EPYC cores (test_model_contract, test_host_syncs,
# test_generation; 2026-12-02). What a test checks does not change: the same operations run, less fused.
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")


def _share_the_cores_between_workers():
    """Under pytest-xdist (`-n auto`) each worker gets its share of the cores for its thread pools. By default
    every backend sizes its pools to all cores, so two workers on two cores run four busy threads that wait on
    each other at every small operation. Variables set by the user are kept."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers <= 1:
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()  # not on macOS
    threads = max(1, (cores or 1) // workers)
    for name in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS"):
        os.environ.setdefault(name, str(threads))
    if threads == 1 and "XLA_FLAGS" not in os.environ:
        os.environ["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


_share_the_cores_between_workers()  # before any backend is imported

import socket  # noqa: E402

import keras  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """Every test starts with float32, a fixed seed and no leftover layer names."""
    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(1234)
    yield
    keras.config.set_dtype_policy("float32")
    # Without Python's full garbage collection (free_memory=True): with TensorFlow, JAX and PyTorch loaded it
    # takes 0.5-2 s per call, more than half of the whole suite's time; Python's own collector still runs.
    keras.backend.clear_session(free_memory=False)


def pytest_addoption(parser):
    parser.addoption("--run-large", action="store_true",
                     help="also run the tests marked `large` (benchmarks end to end, every experiment variant)")


def pytest_collection_modifyitems(config, items):
    run_large = config.getoption("--run-large")
    skip_large = pytest.mark.skip(reason="large: run with --run-large (docs/developing.md)")
    recipes = os.path.join(os.path.dirname(os.path.abspath(__file__)), "recipes") + os.sep
    for item in items:
        if "browser" in getattr(item, "fixturenames", ()):  # `-m "not browser"` leaves out the browser tests
            item.add_marker(pytest.mark.browser)
        if str(item.path).startswith(recipes):  # lets one `-m` pick tests in and out of tests/recipes (.ci/run)
            item.add_marker(pytest.mark.recipes)
        if "large" in item.keywords and not run_large:
            item.add_marker(skip_large)
    # The end-to-end runs first (stable order otherwise): pytest-xdist hands tests out in this order, and a run of
    # minutes handed out last keeps one core busy while the others have finished.
    items.sort(key=lambda item: "slow" not in item.keywords)
    if keras.backend.backend() == "tensorflow":
        return
    skip = pytest.mark.skip(reason=f"needs the TensorFlow backend, running on {keras.backend.backend()}")
    # On PyTorch, jit_compile=True is torch.compile: 30-70 s per test on 2 CPU cores, more than the whole CI
    # budget allows for them. XLA (TensorFlow) and jax.jit (JAX) run them.
    skip_jit = pytest.mark.skip(reason="jit_compile=True is torch.compile on PyTorch; too slow for CI on 2 cores")
    for item in items:
        if "tensorflow_only" in item.keywords and "every_backend" not in item.keywords:
            item.add_marker(skip)
        elif "jit" in item.keywords and keras.backend.backend() == "torch":
            item.add_marker(skip_jit)


@pytest.fixture(scope="session")
def trained_reverser():
    """A small Seq2SeqTransformer trained on reverse-digits once per test session (about 30 s on 2 CPU cores)."""
    from tests.helpers import reverse_digits, small_reverser

    keras.utils.set_random_seed(0)
    source, target = reverse_digits(12000, seed=0)
    model = small_reverser()
    steps = 4 * (len(source) // 64)
    schedule = keras.optimizers.schedules.CosineDecay(0.0, steps, warmup_target=3e-3, warmup_steps=200)
    model.compile_for_training(optimizer=keras.optimizers.Adam(schedule, clipnorm=1.0))
    model.fit((source, target[:, :-1]), target[:, 1:], batch_size=64, epochs=4, verbose=0)
    return model


class NetworkLog:
    """What the code under test tried: TCP connections, and tensorflow-datasets downloads."""

    def __init__(self):
        self.connections = []
        self.downloads = []


@pytest.fixture
def network_unreachable(monkeypatch, tmp_path):
    """No network, as on an offline machine: every TCP connection fails as a name that does not resolve, and
    tensorflow-datasets' default folder is an empty temporary one. Yields a `NetworkLog`; a tfds download that
    starts anyway is recorded and fails at once (instead of retrying for minutes)."""
    log = NetworkLog()

    def refuse(address, *args, **kwargs):
        log.connections.append(address)
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(socket, "create_connection", refuse)
    try:
        import tensorflow_datasets as tfds
    except ImportError:
        yield log
        return

    def download_and_prepare(builder, *args, **kwargs):
        log.downloads.append(builder.name)
        raise ConnectionError("the test's network is unreachable")

    monkeypatch.setattr(tfds.core.DatasetBuilder, "download_and_prepare", download_and_prepare)
    monkeypatch.setattr(tfds.core.constants, "DATA_DIR", str(tmp_path / "default_tensorflow_datasets"))
    yield log
