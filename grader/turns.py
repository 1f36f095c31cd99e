"""Graders share a GPU, except during the checks that time kernels: those have it to themselves.

A timed check compares two timings taken a second apart, and any other work on the GPU in between
fails an honest student: on an H200, while other gradings of exercise 08 ran on the same GPU, the
course's reference timing of a kernel came out at 1.9 and 2.2 times the student's, and the
student's at 3 times the reference's. So every grader process of the machine (`make grade`, pytest,
a notebook's test cell, the classroom's workers) takes the GPU's lock, named after its UUID, before
each check it runs there: shared for an ordinary check, so that these still run side by side;
exclusive for a timed one (`@check(..., timed=True)`), which therefore starts once the checks
running on the GPU have ended, and keeps new ones waiting until it ends. A second file, the queue,
gives a waiting timed check precedence over checks that arrive after it. A lock ends with the check
or with the process that holds it. Programs other than graders are not covered: the timed checks'
messages say so.
"""

import contextlib
import fcntl
import os
import sys
import tempfile
import time
from pathlib import Path

WAIT_SECONDS = 600.0  # after this, run anyway: a stuck holder must not stop a whole class's grading


@contextlib.contextmanager
def gpu_turn(check, ctx, wait: float = WAIT_SECONDS):
    """While `check` runs on a GPU, hold that GPU's lock: exclusive if it is timed, else shared."""
    if not ctx.gpu:
        yield
        return
    with turn(lock_path(_gpu_uuid()), wait, exclusive=check.timed):
        yield


def lock_path(device: str) -> Path:
    """The lock of one GPU, shared by every user of the machine (named by the GPU, not the process)."""
    return Path(tempfile.gettempdir()) / f"flash-attention-course-gpu-{device}.lock"


@contextlib.contextmanager
def turn(path: Path, wait: float, exclusive: bool, say=None):
    """Hold the lock `path` (created if needed), exclusive or shared, waiting at most `wait` seconds.

    A grader that has to wait says so through `say` (stderr by default: never into a report)."""
    say = say or (lambda text: print(text, file=sys.stderr, flush=True))
    waiting = _once(
        lambda: say(
            "waiting for the GPU: other graders are running checks on it, and a timed check needs it to itself"
            if exclusive
            else "waiting for the GPU: another grader is timing kernels on it"
        )
    )
    deadline = time.monotonic() + wait
    with _opened(path, say) as lock, _opened(path.with_suffix(".queue"), say) as queue:
        if lock is None or queue is None:
            yield
            return
        # The queue is held, briefly, by every arrival; a timed check keeps it while it waits, so
        # that checks arriving after it wait behind it instead of overtaking it.
        acquired = _acquire(queue, fcntl.LOCK_EX, deadline, waiting)
        try:
            acquired = _acquire(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH, deadline, waiting) and acquired
        finally:
            fcntl.flock(queue, fcntl.LOCK_UN)
        if not acquired:
            say(f"waited {wait:.0f} s for the GPU's lock {path}: going on anyway")
        yield


@contextlib.contextmanager
def _opened(path: Path, say):
    """A read-only descriptor of `path` (enough to lock it, for any user), or None if it cannot be
    opened; closing it releases its lock."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
    except OSError as exc:
        say(f"running without waiting for other graders: cannot open the GPU's lock {path} ({exc.strerror})")
        yield None
        return
    with contextlib.suppress(OSError):
        os.fchmod(fd, 0o644)  # readable by every user whatever the umask (only its creator may)
    try:
        yield fd
    finally:
        os.close(fd)


def _acquire(fd: int, mode: int, deadline: float, waiting) -> bool:
    """Lock `fd` in `mode`, polling until `deadline`; False if the deadline passed first. After a
    second of waiting it calls `waiting()` (a moment's wait is another arrival passing the queue)."""
    start = time.monotonic()
    while not _try_lock(fd, mode):
        now = time.monotonic()
        if now > deadline:
            return False
        if now - start > 1.0:
            waiting()
        time.sleep(0.05)
    return True


def _once(fn):
    """A function that calls `fn` the first time it is called, and does nothing after."""
    calls = []

    def call():
        if not calls:
            calls.append(fn())

    return call


def _try_lock(fd: int, mode: int) -> bool:
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _gpu_uuid() -> str:
    """The current GPU's UUID: the same physical GPU whatever CUDA_VISIBLE_DEVICES numbers it."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return str(getattr(props, "uuid", props.name)).replace("/", "-").replace(" ", "-")
