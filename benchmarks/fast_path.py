"""The fastest path on this machine: one training step of each recipe's default model, on every Keras backend, in
float32 and `mixed_bfloat16`, with and without `jit_compile`, side by side in one run, as a fraction of the peak
matrix-product speed measured in the same run.

Keras picks its backend once per process, so every (backend, cores) pair gets a worker process of its own
(`KERAS_BACKEND`, thread pools sized to the cores, pinned to them with `sched_setaffinity`). The driver builds
every setup in its worker, runs warm-up steps (tracing, XLA / `jax.jit` / `torch.compile`), then times them in
interleaved rounds: round 1 of every setup on every backend, then round 2, ..., so a slow minute of the machine
falls on all of them alike. Only one worker computes at a time. Each round is `--steps` calls of
`model.train_on_batch` on the same batch, ended by reading the loss (the step has finished).

    python benchmarks/fast_path.py                                   # every setup, 2 cores
    python benchmarks/fast_path.py --setups text_classifier vit --cores 1 2 --output fast_path.json
    python benchmarks/fast_path.py --list                            # the setups and their shapes

Columns: examples/s; `vs anchor`: speed over the anchor row (TensorFlow float32 with XLA, what the recipes ran
before 2026-12 on these shapes when compiled); `of peak`: model FLOPs per second over the peak measured here in
the same precision (the fastest backend's large matrix product; forward + backward = 3x the forward matrix
products, the usual 6·N·T count plus attention's two products; embeddings' gathers and the norms count nothing).

The peak is measured with a 2048 x 2048 product, compiled where the backend compiles (XLA on TensorFlow and JAX,
eager on PyTorch, whose eager kernels are oneDNN's) and eager on TensorFlow (oneDNN, which uses AMX-BF16 units
that XLA's CPU code does not).
"""

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from keras_tfm import hardware  # noqa: E402
BACKENDS = ("tensorflow", "jax", "torch")
PRECISIONS = ("float32", "mixed_bfloat16")

# The recipes' default models at their default batch shapes. `flops` is the forward pass's matrix-product FLOPs
# of one batch; a training step is three times that (the backward pass computes two products per forward one).
MINILM = dict(model_type="bert", vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
              intermediate_size=1536, max_position_embeddings=512, type_vocab_size=2, hidden_act="gelu")


def encoder_flops(tokens, dim, mlp_dim, depth, keys=None):
    """Forward matrix-product FLOPs of `depth` self-attention blocks over `tokens` positions: the four
    projections, the two-layer MLP, and the scores / weighted sum (2 * tokens * keys * dim each)."""
    keys = tokens if keys is None else keys
    return depth * (2 * tokens * (4 * dim * dim + 2 * dim * mlp_dim) + 4 * tokens * keys * dim)


def seq2seq_flops(source, target, dim, mlp_dim, encoder_depth, decoder_depth, vocab):
    decoder = decoder_depth * (2 * target * (4 * dim * dim + 2 * dim * mlp_dim) + 4 * target * target * dim
                               + 2 * target * 2 * dim * dim + 2 * source * 2 * dim * dim + 4 * target * source * dim)
    return encoder_flops(source, dim, mlp_dim, encoder_depth) + decoder + 2 * target * dim * vocab


SETUPS = {
    # name: (recipe, batch, what it is)
    "reverse_digits": ("reverse_digits", 64, "Seq2SeqTransformer 'tiny' (dim 64, 2+2 blocks), 10 -> 11 tokens"),
    "vit_small": ("cifar10_vit --preset small", 128,
                  "ViT 'small' (dim 192, 6 blocks, 4x4 patches, 65 tokens), 32x32 images"),
    "vit_cifar10_cpu": ("cifar10_vit --preset cifar10_cpu", 128,
                        "ViT 'cifar10_cpu' (dim 128, 4 blocks, conv stem, 64 tokens), 32x32 images"),
    "text_classifier": ("imdb_classifier --pretrained", 16,
                        "TextClassifier shaped as all-MiniLM-L6-v2 (6 x 384, 12 heads), 256 word pieces, "
                        "no attention dropout (the recipe's default)"),
    "text_classifier_tiny": ("imdb_classifier", 64,
                             "TextClassifier 'tiny' from scratch (dim 64, 1 block, mean pool), 400 words, "
                             "20,000 vocab"),
    "translate": ("translate", 128, "Seq2SeqTransformer 'small' (dim 256, 3+3 blocks), 32 -> 32 pieces, 8,000 vocab"),
    "language_model": ("language_model", 12, "TransformerLM 'shakespeare_char_cpu' (dim 128, 4 blocks), 64 chars"),
    "masked_lm": ("pretrain_text", 64, "MaskedLanguageModel 'small' (dim 128, 2 blocks), 256 words, 20,000 vocab"),
}


# ---------------------------------------------------------------------------------------------------------------
# The worker: one backend, one set of cores. Reads one JSON command a line on stdin, answers one JSON line.


def build_setup(name, precision, jit):
    """(model compiled with `jit_compile=jit`, x, y, batch, forward FLOPs) of setup `name` in `precision`."""
    import keras
    import numpy as np

    keras.utils.set_random_seed(0)
    keras.config.set_dtype_policy(precision)
    rng = np.random.default_rng(0)
    batch = SETUPS[name][1]
    try:
        if name == "reverse_digits":
            from keras_tfm.data import digits
            from keras_tfm.models import Seq2SeqTransformer

            model = Seq2SeqTransformer.from_preset("tiny", source_vocab_size=digits.VOCAB_SIZE,
                                                   target_vocab_size=digits.VOCAB_SIZE, max_length=12)
            model.compile_for_training(optimizer=keras.optimizers.Adam(1e-3, clipnorm=1.0), jit_compile=jit)
            source, target = digits.make_dataset(batch, 10, seed=0)
            x, y = (source, target[:, :-1]), target[:, 1:]
            flops = seq2seq_flops(source.shape[1], target.shape[1] - 1, 64, 128, 2, 2, digits.VOCAB_SIZE) * batch
        elif name.startswith("vit_"):
            from recipes import cifar10_vit

            preset = name.removeprefix("vit_")
            model = cifar10_vit.build_model(cifar10_vit.parse_args(["--preset", preset]), 10)
            model.compile_for_training(optimizer=keras.optimizers.AdamW(1e-3, clipnorm=1.0), jit_compile=jit)
            x = rng.integers(0, 256, (batch, 32, 32, 3)).astype("float32")
            y = rng.integers(0, 10, batch)
            if preset == "cifar10_cpu":  # a conv stem (3x3 convolutions to 64 and 128 channels), 8x8 tokens
                embed = 2 * (32 * 32 * 3 * 3 * 3 * 64 + 16 * 16 * 3 * 3 * 64 * 128)
                flops = (embed + encoder_flops(64, 128, 256, 4)) * batch
            else:  # 4x4 patches projected to 192, 64 patches and a [CLS] token
                flops = (2 * 64 * 48 * 192 + encoder_flops(65, 192, 384, 6)) * batch
        elif name == "text_classifier":
            from keras_tfm.models import TextClassifier, TextEncoder
            from keras_tfm.models.text_weights import encoder_arguments

            encoder = TextEncoder(**dict(encoder_arguments(MINILM), attention_dropout=0.0), name="encoder")
            model = TextClassifier(encoder=encoder, num_classes=2)
            model.compile_for_training(optimizer=keras.optimizers.AdamW(2e-5, clipnorm=1.0), jit_compile=jit)
            length = 256
            lengths = np.minimum(rng.integers(length // 3, 2 * length, batch), length)  # IMDB-like padding
            mask = (np.arange(length)[None, :] < lengths[:, None]).astype("int32")
            ids = rng.integers(1000, 30000, (batch, length)).astype("int32") * mask
            x, y = {"token_ids": ids, "padding_mask": mask}, rng.integers(0, 2, batch)
            flops = encoder_flops(length, 384, 1536, 6) * batch
        elif name == "text_classifier_tiny":
            from keras_tfm.models import TextClassifier

            vocab, length = 20000, 400
            model = TextClassifier.from_preset("tiny", vocab_size=vocab, max_length=length, num_classes=2,
                                               pool="mean")
            model.compile_for_training(optimizer=keras.optimizers.AdamW(1e-3, clipnorm=1.0), jit_compile=jit)
            lengths = np.minimum(rng.integers(length // 3, 2 * length, batch), length)
            ids = rng.integers(2, vocab, (batch, length)).astype("int32")
            x, y = ids * (np.arange(length)[None, :] < lengths[:, None]), rng.integers(0, 2, batch)
            flops = (encoder_flops(length, 64, 128, 1) + 2 * 64 * 2) * batch
        elif name == "translate":
            from keras_tfm.models import Seq2SeqTransformer

            vocab, length = 8000, 32
            model = Seq2SeqTransformer.from_preset("small", source_vocab_size=vocab, target_vocab_size=vocab,
                                                   max_length=64)
            model.compile_for_training(optimizer=keras.optimizers.AdamW(1e-3, clipnorm=1.0), jit_compile=jit)
            source = rng.integers(3, vocab, (batch, length)).astype("int32")
            target = rng.integers(3, vocab, (batch, length + 1)).astype("int32")
            x, y = (source, target[:, :-1]), target[:, 1:]
            flops = seq2seq_flops(length, length, 256, 512, 3, 3, vocab) * batch
        elif name == "language_model":
            from keras_tfm.models import TransformerLM

            model = TransformerLM.from_preset("shakespeare_char_cpu", vocab_size=65)
            model.compile_for_training(optimizer=keras.optimizers.AdamW(1e-3, clipnorm=1.0), jit_compile=jit)
            ids = rng.integers(1, 65, (batch, 65)).astype("int32")
            x, y = ids[:, :-1], ids[:, 1:]
            flops = (encoder_flops(64, 128, 512, 4, keys=32) + 2 * 64 * 128 * 65) * batch  # causal: half the keys
        elif name == "masked_lm":
            from keras_tfm.data.mlm import masked_lm_dataset
            from keras_tfm.models import MaskedLanguageModel

            vocab, length = 20000, 256
            model = MaskedLanguageModel.from_preset("small", vocab_size=vocab, max_length=length)
            model.compile_for_training(optimizer=keras.optimizers.AdamW(1e-3, clipnorm=1.0), jit_compile=jit)
            ids = rng.integers(3, vocab, (batch, length)).astype("int32")
            x, y = next(iter(masked_lm_dataset(ids, batch, mask_token_id=2, vocab_size=vocab).as_numpy_iterator()))
            predictions = y.shape[1]
            flops = (encoder_flops(length, 128, 256, 2) + 2 * predictions * (128 * 128 + 128 * vocab)) * batch
        else:
            raise ValueError(f"unknown setup {name!r}")
    finally:
        keras.config.set_dtype_policy("float32")
    return model, x, y, batch, flops


def peak_gflops(dtype, size=2048, repeats=4):
    """This backend's GFLOP/s for a `size` x `size` product in `dtype`: the faster of its eager and compiled
    products (`keras_tfm.hardware.matmul_gflops`: XLA on TensorFlow, jax.jit on JAX, eager on PyTorch)."""
    from keras_tfm.hardware import matmul_gflops

    import keras

    backend = keras.backend.backend()
    modes = (False, True) if backend == "tensorflow" else (False,)  # JAX always compiles; PyTorch never here
    return max(matmul_gflops(dtype, size=size, repeats=repeats, compiled=compiled) for compiled in modes)


def time_steps(entry, steps):
    """Seconds for `steps` training steps of a built setup, the last one finished (its loss read)."""
    model, x, y = entry["model"], entry["x"], entry["y"]
    start = time.perf_counter()
    for _ in range(steps):
        logs = model.train_on_batch(x, y, return_dict=True)
    float(logs["loss"])  # return_dict gives numbers: the step has finished
    return time.perf_counter() - start


def worker():
    threads = hardware.set_threads()  # the pools' variables came with the environment (Worker); this resizes
    if os.environ.get("KERAS_BACKEND") != "tensorflow":
        from recipes import devices

        devices.hide_gpus_from_tensorflow()  # TensorFlow, which tf.data needs, stays off the GPUs
    import keras

    built = {}
    say = sys.stdout.write
    for line in sys.stdin:
        command = json.loads(line)
        try:
            if command["op"] == "hello":
                answer = {"backend": keras.backend.backend(), "threads": threads}
            elif command["op"] == "peak":
                answer = {dtype: peak_gflops(dtype) for dtype in command["dtypes"]}
            elif command["op"] == "build":
                key = (command["setup"], command["precision"], command["jit"])
                started = time.perf_counter()
                model, x, y, batch, flops = build_setup(*key)
                built[key] = entry = dict(model=model, x=x, y=y)
                warm_up = time_steps(entry, command["warmup"])  # traces and compiles
                answer = {"batch": batch, "flops": flops, "warmup_seconds": warm_up,
                          "build_seconds": time.perf_counter() - started}
            elif command["op"] == "drop":  # frees a setup's models before the next one is built
                built.clear()
                keras.backend.clear_session()
                gc.collect()
                answer = {}
            elif command["op"] == "time":
                key = (command["setup"], command["precision"], command["jit"])
                answer = {"seconds": time_steps(built[key], command["steps"]) / command["steps"]}
            else:
                answer = {"error": f"unknown op {command['op']!r}"}
        except Exception as error:  # reported to the driver, which prints it and goes on without that setup
            answer = {"error": f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"}
        say("@@" + json.dumps(answer) + "\n")
        sys.stdout.flush()


# ---------------------------------------------------------------------------------------------------------------
# The driver.


class Worker:
    def __init__(self, backend, cores):
        cpus = sorted(os.sched_getaffinity(0))[:cores]
        env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3", KERAS_TFM_CORES=str(cores))
        env.update(hardware.thread_environment(cores, env))  # before the worker's backend starts
        self.name = f"{backend}, {cores} core{'s' if cores > 1 else ''}"
        self.process = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker"], env=env, text=True,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT,
                                        preexec_fn=lambda: os.sched_setaffinity(0, cpus))

    def ask(self, **command):
        """The worker's answer to `command`; {"error": ...} once the worker has ended (e.g. out of memory)."""
        if self.process.poll() is None:
            try:
                self.process.stdin.write(json.dumps(command) + "\n")
                self.process.stdin.flush()
                for line in self.process.stdout:
                    if line.startswith("@@"):
                        return json.loads(line[2:])
            except BrokenPipeError:
                pass
        return {"error": f"the {self.name} worker has ended (exit {self.process.wait()})"}

    def close(self):
        if self.process.poll() is None:
            self.process.stdin.close()
        self.process.wait()


def jit_modes(backend, jit):
    """The `jit_compile` values to run on `backend` for `--jit`; "recipes" = what the recipes take on a CPU
    (recipes/fast_paths.json): XLA on TensorFlow, jax.jit on JAX, eager on PyTorch, plus TensorFlow's graph
    without XLA (its default before 2026-12)."""
    if jit == "recipes":
        return {"tensorflow": [False, True], "jax": [True], "torch": [False]}[backend]
    return {"off": [False], "on": [True], "both": [False, True]}[jit]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setups", nargs="+", choices=list(SETUPS), default=list(SETUPS))
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--precisions", nargs="+", choices=PRECISIONS, default=list(PRECISIONS))
    parser.add_argument("--jit", choices=("off", "on", "both", "recipes"), default="recipes",
                        help="jit_compile False and/or True (on PyTorch True is torch.compile: minutes to compile); "
                             "recipes: XLA and a plain graph on TensorFlow, jax.jit on JAX, eager on PyTorch")
    parser.add_argument("--no-torch-compile", action="store_true", help="leave out jit_compile=True on PyTorch")
    parser.add_argument("--cores", nargs="+", type=int, default=[2], help="core counts to pin the workers to")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per configuration")
    parser.add_argument("--steps", type=int, default=3, help="training steps per round")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps after building (compilation)")
    parser.add_argument("--output", default=None, help="write every measurement as JSON here")
    parser.add_argument("--list", action="store_true", help="print the setups and exit")
    parser.add_argument("--table", nargs="+", metavar="JSON", default=None,
                        help="print the entry of recipes/fast_paths.json for the CPU these --output files were "
                             "measured on (the fastest path per recipe and backend at --cores, default 2) and exit")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker()
    if args.table:
        print(fast_paths_table([json.load(open(path)) for path in args.table], args.cores[0]))
        return None
    if args.list:
        for name, (recipe, batch, what) in SETUPS.items():
            print(f"{name:16s} batch {batch:4d}  {what}  (recipes.{recipe})")
        return None
    available = len(os.sched_getaffinity(0))
    if max(args.cores) > available:
        parser.error(f"--cores {max(args.cores)}: this process may use {available} cores")

    results = {"date": time.strftime("%Y-%m-%d"), "cpu": cpu_name(), "cpu_kind": hardware.cpu_kind(),
               "configurations": [], "peaks": {}}
    for cores in args.cores:
        workers = {backend: Worker(backend, cores) for backend in args.backends}
        for backend, work in workers.items():
            hello = work.ask(op="hello")
            # bfloat16's peak only where bf16 is measured: without bf16 units (AVX2) one product takes minutes
            dtypes = ["float32"] + (["bfloat16"] if "mixed_bfloat16" in args.precisions else [])
            peaks = work.ask(op="peak", dtypes=dtypes)
            results["peaks"][f"{backend}/{cores}"] = peaks
            print(f"{work.name}: {hello['threads']} threads; 2048x2048 product "
                  + ", ".join(f"{dtype} {value:.0f} GFLOP/s" for dtype, value in peaks.items()), flush=True)
        for setup in args.setups:  # one at a time: only one setup's models are in memory
            configurations = []
            for backend in args.backends:
                for precision in args.precisions:
                    for jit in jit_modes(backend, args.jit):
                        if jit and backend == "torch" and args.no_torch_compile:
                            continue
                        key = dict(setup=setup, precision=precision, jit=jit)
                        built = workers[backend].ask(op="build", warmup=args.warmup, **key)
                        label = f"{setup} {workers[backend].name} {precision}{' jit' if jit else ''}"
                        if "error" in built:
                            print(f"  {label}: {built['error']}", flush=True)
                            continue
                        print(f"  built {label} in {built['build_seconds']:.0f} s", flush=True)
                        configurations.append(dict(key, backend=backend, cores=cores, batch=built["batch"],
                                                   flops=built["flops"], seconds=[]))
            for _ in range(args.rounds):  # interleaved: every configuration once per round
                for configuration in configurations:
                    key = {k: configuration[k] for k in ("setup", "precision", "jit")}
                    answer = workers[configuration["backend"]].ask(op="time", steps=args.steps, **key)
                    if "error" in answer:
                        print(f"  {setup} {configuration['backend']}: {answer['error']}", flush=True)
                    configuration["seconds"].append(answer.get("seconds", float("nan")))
            for work in workers.values():
                work.ask(op="drop")
            # A configuration whose worker died (NaN) is left out.
            results["configurations"] += [c for c in configurations if all(x == x for x in c["seconds"])]
            report(results, only=(setup, cores))
            if args.output:
                with open(args.output, "w") as file:
                    json.dump(results, file, indent=1)
        for work in workers.values():
            work.close()
    return results


def report(results, only=None):
    """A table per setup and core count (or for `only`, one (setup, cores) pair): examples/s, speed over the
    anchor, fraction of peak."""
    peaks = {}
    for key, values in results["peaks"].items():
        cores = int(key.split("/")[1])
        for dtype, value in values.items():
            peaks[cores, dtype] = max(peaks.get((cores, dtype), 0.0), value)
    groups = {}
    for c in results["configurations"]:
        groups.setdefault((c["setup"], c["cores"]), []).append(c)
    for (setup, cores), rows in groups.items():
        if only and (setup, cores) != only:
            continue
        anchor = next((r for r in rows if (r["backend"], r["precision"], r["jit"]) == ("tensorflow", "float32", True)),
                      None)
        anchor_speed = anchor and anchor["batch"] / statistics.median(anchor["seconds"])
        print(f"\n{setup} ({SETUPS[setup][2]}), batch {rows[0]['batch']}, {cores} core{'s' if cores > 1 else ''}:")
        print(f"  {'backend':11s} {'precision':15s} {'jit':4s} {'examples/s':>10s} {'vs anchor':>9s} {'of peak':>8s}")
        for r in sorted(rows, key=lambda r: statistics.median(r["seconds"])):
            seconds = statistics.median(r["seconds"])
            speed = r["batch"] / seconds
            peak = peaks[cores, "bfloat16" if r["precision"] == "mixed_bfloat16" else "float32"]
            of_peak = 3 * r["flops"] / seconds / 1e9 / peak
            versus = f"{speed / anchor_speed:8.2f}x" if anchor_speed else f"{'':>9s}"
            print(f"  {r['backend']:11s} {r['precision']:15s} {'on' if r['jit'] else 'off':4s} {speed:10.1f} "
                  f"{versus} {of_peak:7.1%}", flush=True)


def run_kind(run):
    """The kind of CPU (`keras_tfm.hardware.cpu_kind`) a `--output` file was measured on. Older files name their
    bf16 units (None: not known), the oldest (before 2026-12-03) only AMX, in the CPU's name."""
    if "cpu_kind" in run:
        return run["cpu_kind"]
    if "bf16_units" in run:
        return run["bf16_units"]
    return "amx_bf16" if "(AMX-BF16)" in run.get("cpu", "") else None


def fast_paths_table(runs, cores=2):
    """This CPU kind's entry of `recipes/fast_paths.json` (what `recipes.fast_paths.FAST_PATHS` reads) as JSON text:
    for each recipe of SETUPS and each backend, the fastest (dtype policy, jit_compile, examples/s) measured at
    `cores` cores in `runs` (the JSON that `--output` writes; a later run's measurement of the same configuration
    replaces an earlier one's), and on which CPU and when. The runs must come from CPUs of one kind
    (`keras_tfm.hardware.cpu_kind`); the entry replaces that kind's in the file."""
    kinds = {run_kind(run) for run in runs}
    if len(kinds) != 1 or None in kinds:
        raise ValueError(f"`runs` must be measured on CPUs of one kind (amx_bf16, avx512_bf16 or avx2): got "
                         f"{sorted(map(str, kinds))}. A CPU of no known kind has no table.")
    speeds = {}
    for run in runs:
        for c in run["configurations"]:
            if c["cores"] == cores and c["setup"] in SETUPS:
                speeds[c["setup"], c["backend"], c["precision"], c["jit"]] = c["batch"] / statistics.median(
                    c["seconds"])
    table = {}
    for (setup, backend, precision, jit), speed in speeds.items():
        paths = table.setdefault(SETUPS[setup][0], {})
        if backend not in paths or speed > paths[backend]["examples_per_second"]:
            paths[backend] = {"policy": precision, "jit_compile": jit, "examples_per_second": float(f"{speed:.3g}")}
    measured = "; ".join(sorted({f"{run.get('cpu', '?')}, {run.get('date', '?')}" for run in runs}))
    entry = {"measured": measured, "paths": {recipe: dict(sorted(paths.items())) for recipe, paths in table.items()}}
    return json.dumps({kinds.pop(): entry}, indent=2)


def cpu_name():
    try:
        with open("/proc/cpuinfo") as file:
            names = [line.split(":", 1)[1].strip() for line in file if line.startswith("model name")]
        kind = {"amx_bf16": " (AMX-BF16)", "avx512_bf16": " (AVX512-BF16)", "avx2": " (AVX2, no bf16 units)"}.get(
            hardware.cpu_kind(), "")
        return f"{names[0] if names else 'unknown'}{kind}"
    except OSError:
        return "unknown"


if __name__ == "__main__":
    main()
