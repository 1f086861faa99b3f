"""A run folder's life: started, stopped (Ctrl-C, SIGTERM, or a crash), resumed, finished.

    run.lock       held while a process trains in the folder: its pid, host and command (one writer per folder)
    run.json       written at the start: the recipe, the flags that shape the model's weights, and one
                   "segment" per start (its command, the epoch it began at, the flags that differ from the
                   segment before)
    backup/        the last finished epoch (keras_tfm's `BackupAndRestore`), kept until the summary is written
    summary.json   written last (`common.finish`), with the recipe's name and run.json's segments

A run that is started again in its folder resumes (`BackupAndRestore` restores the last finished epoch, or the one
before when the newest is damaged). It is refused at start when a flag that shapes the weights (a preset, a size, a
vocabulary) differs from the run's, or when the folder belongs to another recipe: both would fail later, deep
inside Keras' weight loading; and while another live process holds the folder's lock.

Every file is written whole or not at all (`keras_tfm.files`), so what ends a run uncaught (the OOM killer, a
preempted machine, SIGKILL) loses at most the epoch in progress. A full disk or a read-only folder ends the run
with one line that names the file and the free space (`run_main`); the last good state stays, to resume from.
"""

import atexit
import contextlib
import errno
import json
import os
import shlex
import shutil
import signal
import socket
import sys
import time

from keras_tfm import files
from keras_tfm.callbacks.backup_and_restore import backed_up_epochs
from keras_tfm.callbacks.time_budget import recorded_states

RUN_FILE = "run.json"
LOCK_FILE = "run.lock"
FINISHED = "summary.json"  # written last by `common.finish`: its presence means the run is complete
BACKUP = "backup"  # BackupAndRestore's last finished epochs and training_metadata.json; a TimeBudget's state
BUDGET_STATE = "time_budget.json"  # in BACKUP: a TimeBudget's seconds used and plan, epoch by epoch
# What a full or protected disk raises: the run ends with one line, its last good state kept
WRITE_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)
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
    """The epochs of the main training that are backed up in `output_dir` (0 when none is). Where the backup's
    newest state is damaged, the restore says so and goes on from the one before."""
    return backed_up_epochs(os.path.join(output_dir, BACKUP))


def epochs_of(output_dir, done, args):
    """How many epochs the run in `output_dir` trains, as it stands after `done` epochs: the plan its time budget
    recorded then (`TimeBudget`'s state in BACKUP/BUDGET_STATE), else `args.epochs` (None if neither is known)."""
    entry = recorded_states(os.path.join(output_dir, BACKUP, BUDGET_STATE)).get(str(done))
    planned = entry.get("planned_epochs") if isinstance(entry, dict) else None  # None: no budget, or no record
    return planned or getattr(args, "epochs", None)


# -- one writer per run folder ------------------------------------------------------------------------------------

_locked = set()  # the folders whose lock this process holds


def lock(output_dir):
    """Takes `output_dir`'s lock file (`run.lock`: pid, host, process start, command) for this process, released
    when it exits. Another live process holding it: a `SystemExit` with status 2 and one line that names it. A
    lock left by a process that is gone (killed): taken over, with a line that says so."""
    path = os.path.join(output_dir, LOCK_FILE)
    mine = {"pid": os.getpid(), "host": socket.gethostname(), "process_start": _process_start(os.getpid()),
            "command": shlex.join(sys.argv), "since": time.strftime("%Y-%m-%dT%H:%M:%S")}
    for _ in range(3):  # another process may take a stale lock at the same moment: then look again
        try:
            _create_whole(path, json.dumps(mine))
        except FileExistsError:
            owner = _read_lock(path)
            if owner is not None and owner.get("pid") == os.getpid() and owner.get("host") == mine["host"]:
                break  # this process holds it already (a recipe's main called again, as the tests do)
            if owner is not None and _alive(owner):
                where = "" if owner.get("host") == mine["host"] else f" on {owner.get('host')}"
                print(f"error: {output_dir} is in use by process {owner.get('pid')}{where} "
                      f"(since {owner.get('since')}: {owner.get('command')}); two runs in one folder would overwrite "
                      f"each other's files. Wait for it to end, or give another --output-dir. ({path} names it; "
                      "delete that file only if that process is gone.)", file=sys.stderr)
                raise SystemExit(2)
            left = "an unreadable lock" if owner is None else f"the lock of process {owner.get('pid')}, which is gone"
            print(f"{output_dir}: taking over {left} (a run that was killed)")
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
            continue
        break
    if output_dir not in _locked:
        _locked.add(output_dir)
        atexit.register(unlock, output_dir)


def _create_whole(path, text):
    """Creates `path` holding `text` unless it exists (FileExistsError), in one step: the text is written under a
    partial name first and then hard-linked to `path`, so that another process never reads the lock empty (an
    empty lock is taken over) while its owner is still writing it."""
    partial = files.partial_path(path)
    try:
        with open(partial, "w") as file:
            file.write(text)
        try:
            os.link(partial, path)  # atomic, and fails if `path` exists, as O_EXCL does
        except FileNotFoundError as error:
            # The partial file deleted under us: a run holding the lock has just cleared the folder's partial files.
            raise FileExistsError(errno.EEXIST, "the folder's lock was taken meanwhile", path) from error
        except FileExistsError:
            raise
        except OSError:  # a file system without hard links (FAT, some network mounts): created in place
            with open(path, "x") as file:
                file.write(text)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(partial)


def unlock(output_dir):
    """Gives back `output_dir`'s lock, if this process holds it."""
    path = os.path.join(output_dir, LOCK_FILE)
    owner = _read_lock(path)
    if owner is not None and owner.get("pid") == os.getpid() and owner.get("host") == socket.gethostname():
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
    _locked.discard(output_dir)


def lock_owner(output_dir):
    """What `output_dir`'s lock file says of the process holding it (pid, host, command...), or None."""
    return _read_lock(os.path.join(output_dir, LOCK_FILE))


def _read_lock(path):
    try:
        with open(path) as file:
            owner = json.load(file)
        return owner if isinstance(owner, dict) else None
    except (OSError, ValueError):
        return None  # gone meanwhile, or left empty by a process killed while writing it


def _alive(owner):
    """Whether the lock's owner still runs. On another host that cannot be checked: taken as alive."""
    if owner.get("host") != socket.gethostname():
        return True
    pid = owner.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, another user's
    started = _process_start(pid)
    recorded = owner.get("process_start")
    # A zombie (killed, not yet waited for) has finished; a pid reused by a new process started at another time.
    return started != "zombie" and (recorded is None or started is None or started == recorded)


def _process_start(pid):
    """The process' start time in clock ticks since boot (Linux' /proc), "zombie" for one that has ended but is
    not yet waited for, None where /proc cannot tell."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            fields = file.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return "zombie" if fields[0] == "Z" else int(fields[19])


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
        lock(output_dir)
        files.remove_partials(output_dir)  # what a killed writer left; the files they were for are whole
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
        done = finished_epochs(output_dir)
        epochs = epochs_of(output_dir, done, args)
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
        files.write_json(path, record, indent=2, default=str)
        _current = cls(recipe, output_dir, args, record)
        return _current

    def segments(self):
        return self.record["segments"]

    def stopped_message(self):
        done = finished_epochs(self.output_dir)
        epochs = epochs_of(self.output_dir, done, self.args)
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


def write_error_message(error):
    """One line for an `OSError` met while writing a run file: the file, the reason, the free space there, and
    where the run can go on from."""
    target = error.filename or "a run file"
    folder = os.path.dirname(os.path.abspath(target)) if error.filename else os.getcwd()
    while not os.path.isdir(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    try:
        free = f"{_size(shutil.disk_usage(folder).free)} free there"
    except OSError:
        free = "free space unknown"
    reason = error.strerror or str(error)
    line = f"could not write {target}: {reason} ({free})."
    if _current is None:
        return line
    done = finished_epochs(_current.output_dir)
    kept = f"epoch {done} is kept" if done else "no epoch had finished"
    return (f"{line} The run stopped; {kept} in {_current.output_dir}. Make room (or make the folder writable) "
            f"and resume with: {_current.record['segments'][-1]['command']}")


def _size(count):
    for unit in ("bytes", "KB", "MB", "GB"):
        if count < 1024 or unit == "GB":
            return f"{count:.0f} {unit}" if unit == "bytes" else f"{count:.1f} {unit}"
        count /= 1024


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
    except OSError as error:
        if not isinstance(error, files.WriteError) and error.errno not in WRITE_ERRORS:
            raise
        print(f"\nerror: {write_error_message(error)}", file=sys.stderr)
        return 1
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)
