"""A run folder's life: started, stopped (Ctrl-C or SIGTERM), resumed, finished. Plain Python, no TensorFlow.

    run.json       written at the start: the recipe, the flags that shape the model's weights, and one
                   "segment" per start (its command, the epoch it began at, the flags that differ from the
                   segment before)
    summary.json   written last (`common.finish`), with the recipe's name and run.json's segments

A run that is started again in its folder resumes (Keras' `BackupAndRestore` restores the last finished epoch).
It is refused at start when a flag that shapes the weights (a preset, a size, a vocabulary) differs from the run's,
or when the folder belongs to another recipe: both would fail later, deep inside Keras' weight loading.
"""

import contextlib
import json
import os
import shlex
import signal
import sys
import time

RUN_FILE = "run.json"
FINISHED = "summary.json"  # written last by `common.finish`: its presence means the run is complete
BACKUP_METADATA = os.path.join("backup", "training_metadata.json")  # Keras' BackupAndRestore: {"epoch": N, ...}
_NOT_RECORDED = {"argv", "output_dir", "overwrite"}  # where the run is, not how it trains

_current = None  # the Run this process is training, for the message when it is stopped


class Stopped(BaseException):
    """Raised in the main thread by SIGTERM (SIGINT raises KeyboardInterrupt), so that `run_main` ends the run
    with one line instead of a traceback. A BaseException: `except Exception` blocks do not swallow it."""

    def __init__(self, signal_number):
        super().__init__(signal_number)
        self.exit_code = 128 + signal_number


def command(recipe, argv, output_dir):
    """The shell command that continues the run in `output_dir`: `argv` with its `--output-dir` (and
    `--overwrite`, which would delete the run) replaced."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--output-dir":
            skip = True
        elif not arg.startswith("--output-dir=") and arg != "--overwrite":
            kept.append(arg)
    return shlex.join(["python", "-m", f"recipes.{recipe}", *kept, "--output-dir", output_dir])


def finished_epochs(output_dir):
    """The epochs of the main training that are backed up in `output_dir` (0 when none is)."""
    path = os.path.join(output_dir, BACKUP_METADATA)
    if not os.path.exists(path):
        return 0
    with open(path) as file:
        return int(json.load(file).get("epoch", 0))


def _flag(name):
    return "--" + name.replace("_", "-")


def _shown(value):
    return value if isinstance(value, str) else repr(value)


class Run:
    """The run a recipe trains in `output_dir`: `Run.start` opens it, `segments()` goes into the summary."""

    def __init__(self, recipe, output_dir, args, record):
        self.recipe, self.output_dir, self.args, self.record = recipe, output_dir, args, record

    @classmethod
    def start(cls, recipe, output_dir, args, model_flags):
        """Opens the run in `output_dir` (which `common.output_directory` made): prints the folder and the command
        that resumes it; on a resumed run checks the folder's recipe and `model_flags` (argument names in `args`)
        against run.json (a `SystemExit` with status 2 and a message naming the flag and both values), says from
        which epoch it resumes, and records the new segment."""
        global _current, _writing, _pending
        _writing, _pending = 0, None  # nothing is being written as a run starts (an earlier one may have failed)
        argv = list(getattr(args, "argv", None) or [])
        flags = {name: value for name, value in vars(args).items() if name not in _NOT_RECORDED}
        flags = json.loads(json.dumps(flags, default=str))  # as run.json holds them: lists, strings for paths
        path = os.path.join(output_dir, RUN_FILE)
        shaping = {name: flags.get(name) for name in model_flags}
        record = None
        if os.path.exists(path):
            with open(path) as file:
                record = json.load(file)
            _refuse_another_run(recipe, output_dir, record, shaping)
        resume = command(recipe, argv, output_dir)
        epochs = getattr(args, "epochs", None)
        done = finished_epochs(output_dir)
        if record is None:  # a new run (or one begun before run.json was written)
            record = {"recipe": recipe, "model_flags": shaping, "segments": []}
        print(f"run folder: {output_dir}\n  if it is stopped, resume it with: {resume}")
        if record["segments"] or done:
            of = f" of {epochs}" if epochs else ""
            restored = f"{done} finished epoch{'s' * (done != 1)} restored from backup/" if done else "none had finished"
            print(f"resuming from epoch {done + 1}{of} ({restored})")
        previous = {}
        for segment in record["segments"]:
            previous.update(segment["flags"])
        changed = {name: value for name, value in flags.items() if previous.get(name, object()) != value}
        if record["segments"] and changed:
            print("  changed since the last start: " + ", ".join(
                f"{_flag(name)} {_shown(previous.get(name))} -> {_shown(value)}" for name, value in changed.items()))
        record["segments"].append({"command": resume, "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
                                   "from_epoch": done, "flags": changed if record["segments"] else flags})
        with open(path, "w") as file:
            json.dump(record, file, indent=2, default=str)
        _current = cls(recipe, output_dir, args, record)
        return _current

    def segments(self):
        return self.record["segments"]

    def stopped_message(self):
        done = finished_epochs(self.output_dir)
        epochs = getattr(self.args, "epochs", None)
        at = f"after epoch {done}" + (f" of {epochs}" if epochs else "") if done else "before the first epoch ended"
        return f"stopped {at}; resume with: {self.record['segments'][-1]['command']}"


def current(output_dir=None):
    """The `Run` this process started last (in `output_dir`, when given), or None."""
    if _current is None or (output_dir is not None and os.path.abspath(output_dir) != os.path.abspath(_current.output_dir)):
        return None
    return _current


def _refuse_another_run(recipe, output_dir, record, model_flags):
    if record.get("recipe") != recipe:
        print(f"error: {output_dir} holds an unfinished {record.get('recipe')} run, not a {recipe} one; give "
              f"{recipe} another --output-dir (or none, for a new timestamped folder).", file=sys.stderr)
        raise SystemExit(2)
    saved = record.get("model_flags", {})
    for name, value in model_flags.items():
        if name in saved and saved[name] != value:
            ran, asked = _shown(saved[name]), _shown(value)
            print(f"error: {_flag(name)} {asked} differs from the run's {_flag(name)} {ran}: {output_dir} was "
                  f"started with {ran}, and {_flag(name)} shapes the model's weights, so its saved epochs cannot "
                  f"be resumed with {asked}. Resume with {_flag(name)} {ran}, or give another --output-dir.",
                  file=sys.stderr)
            raise SystemExit(2)


def finished_recipe(output_dir):
    """The recipe named by the finished run in `output_dir`'s summary.json (None for runs saved before it was
    recorded, or a summary that cannot be read)."""
    try:
        with open(os.path.join(output_dir, FINISHED)) as file:
            return json.load(file).get("recipe")
    except (OSError, ValueError, AttributeError):
        return None


_writing = 0  # > 0 while a backup, checkpoint or log row is being written (see `uninterrupted`)
_pending = None  # a signal that arrived meanwhile


def hold():
    """From here until the matching `release`, Ctrl-C or SIGTERM (under `run_main`) waits: the files written in
    between (an epoch's backup, checkpoint and log row) are never left half written or out of step."""
    global _writing
    _writing += 1


def release():
    """Ends a `hold`; a signal that arrived meanwhile takes effect now."""
    global _writing, _pending
    _writing = max(_writing - 1, 0)
    if not _writing and _pending is not None:
        signal_number, _pending = _pending, None
        _stop(signal_number)


@contextlib.contextmanager
def uninterrupted():
    """`hold` and `release` around a block."""
    hold()
    try:
        yield
    finally:
        release()


def _stop(signal_number):
    if signal_number == signal.SIGINT:
        raise KeyboardInterrupt
    raise Stopped(signal_number)


def _on_signal(signal_number, frame):
    global _pending
    if _writing:
        _pending = signal_number
    else:
        _stop(signal_number)


def run_main(main):
    """Runs a recipe's `main()` as a program and returns its exit status: 0 when it returned a summary, 130 after
    Ctrl-C and 143 after SIGTERM, each ending with one line that says where the run stopped and how to resume
    (the last finished epoch is in the run's backup)."""
    before = {number: signal.signal(number, _on_signal) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        return 0 if main() else 1
    except (KeyboardInterrupt, Stopped) as stop:
        code = stop.exit_code if isinstance(stop, Stopped) else 128 + signal.SIGINT
        message = _current.stopped_message() if _current is not None else "stopped before the run folder was made"
        print(f"\n{message}", file=sys.stderr)
        return code
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)
