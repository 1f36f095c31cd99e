"""Graders take turns on a GPU for the checks that time kernels.

Two graders timing kernels on one GPU at once slow each other down, and a check that compares two
timings taken a second apart then fails an honest student: on an H200, two gradings of exercise 08
side by side put the course's reference timing of the same kernel at 1.9 and 2.2 times the
student's. So before a timed check (`@check(..., timed=True)`) every grader process on the machine
(`make grade`, pytest, a notebook's test cell, the classroom's workers) takes an exclusive lock
named after the GPU's UUID, and releases it when the check ends; the lock also ends with the
process that holds it. Correctness checks still run side by side. Programs other than graders are
not covered: the timed checks' messages say so.
"""

import contextlib
import fcntl
import os
import sys
import tempfile
import time
from pathlib import Path

WAIT_SECONDS = 600.0  # after this, time anyway: a stuck holder must not stop a whole class's grading


@contextlib.contextmanager
def gpu_turn(check, ctx, wait: float = WAIT_SECONDS):
    """Hold this GPU's lock while `check` runs, if it times kernels on a GPU; otherwise do nothing."""
    if not (check.timed and ctx.gpu):
        yield
        return
    with turn(lock_path(_gpu_uuid()), wait):
        yield


def lock_path(device: str) -> Path:
    """The lock of one GPU, shared by every user of the machine (named by the GPU, not the process)."""
    return Path(tempfile.gettempdir()) / f"flash-attention-course-gpu-{device}.lock"


@contextlib.contextmanager
def turn(path: Path, wait: float, say=None):
    """Hold the exclusive lock `path` (created if needed), waiting at most `wait` seconds for it.

    What a waiting grader prints goes to `say` (stderr by default: never into a report)."""
    say = say or (lambda text: print(text, file=sys.stderr, flush=True))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)  # read-only is enough to lock, for any user
        with contextlib.suppress(OSError):
            os.fchmod(fd, 0o644)  # readable by every user whatever the umask (only its creator may)
    except OSError as exc:
        say(f"timing without waiting for other graders: cannot open the GPU's lock {path} ({exc.strerror})")
        yield
        return
    try:
        if not _try_lock(fd):
            say(f"waiting for the GPU: another grader is timing kernels on it (lock {path})")
            deadline = time.monotonic() + wait
            while not _try_lock(fd):
                if time.monotonic() > deadline:
                    say(f"waited {wait:.0f} s for the GPU's lock {path}: timing anyway")
                    break
                time.sleep(0.2)
        yield
    finally:
        os.close(fd)  # closing the file releases the lock


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _gpu_uuid() -> str:
    """The current GPU's UUID: the same physical GPU whatever CUDA_VISIBLE_DEVICES numbers it."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return str(getattr(props, "uuid", props.name)).replace("/", "-").replace(" ", "-")
