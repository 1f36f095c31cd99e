"""The grader's side of the wall around student code.

Student code never runs in the grader's process. For each exercise the grader starts a disposable
process (common.serve) that imports the student's module and answers calls: the grader sends
input tensors and receives output tensors (common.wire), then compares and scores on its own side.

Where the grader runs as root and Linux namespaces are available (a grading server, Gradescope,
the container), that process is isolated:
- it sees a file tree of its own: the system's programs and libraries, Python's packages, and a
  sandbox folder holding a copy of the student's files and the student runtime (common/'s
  env, shapes, tuning, loader, harness, wire, serve, fixtures). The course repository (solutions/,
  grader/, tests/), other submissions, the seed, the results file and the rest of the machine
  are not in it;
- it runs as an unprivileged user of its own, with caps on file size and processes;
- it is the init of a PID namespace: when it ends, or is killed, every process it started dies.
Elsewhere (a student's own laptop) it is a plain child process in a private folder, with the same
protocol: nothing it does reaches the grader's memory or its results, but it has the user's
file permissions. `isolation()` says which applies; the report header prints it.
"""

import functools
import hashlib
import io
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import wire
from common.tuning import ONE_CONFIG
from grader import ROOT, zygote
from grader.core import MissingFunction, ProcessEnded, StudentCodeFailed, raised  # noqa: F401 - raised: for checks

RUNTIME_FILES = (
    "__init__.py",
    "env.py",
    "shapes.py",
    "tuning.py",
    "loader.py",
    "harness.py",
    "wire.py",
    "serve.py",
    "fixtures.py",
)
MAX_STUDENT_FILE = 4 << 20  # bytes: larger files are not copied into the sandbox
MAX_COMPILE_CACHE = 512 << 20  # bytes of a target's Triton cache kept between grading runs
OUTPUT_SHOWN = 2000  # characters of a student's printed output shown per check

# The file tree of a sandbox, built by the init of its new mount and PID namespaces (grader/zygote.py),
# as root, before it starts the server chrooted into $R as the sandbox user: read-only binds of the
# system, of Python and its packages, and the sandbox folder at /sandbox.
_SETUP = r"""
R=$1; B=$2; shift 2
fail() { echo "the grader could not build the sandbox: $*" >&2; exit 125; }
mount -t tmpfs -o mode=755 course-sandbox "$R" || fail "tmpfs on $R"
# /tmp first: a Python (a clone's .venv) that lives under /tmp is bound on top of it, not hidden by it.
mkdir -p "$R/tmp" && mount -t tmpfs -o mode=1777 tmp "$R/tmp" || fail "/tmp"
for d in /usr /bin /sbin /lib /lib32 /lib64 /libx32 /etc "$@"; do
  if [ -L "$d" ]; then
    mkdir -p "$R$(dirname "$d")" && ln -s "$(readlink "$d")" "$R$d" || fail "link $d"
  elif [ -d "$d" ]; then
    mkdir -p "$R$d" && mount --rbind "$d" "$R$d" || fail "bind $d"
    mount -o remount,bind,ro "$R$d" 2>/dev/null
  fi
done
mkdir -p "$R/dev" "$R/proc" "$R/sys" "$R/sandbox" || fail "folders"
mount --rbind /dev "$R/dev" && mount -t tmpfs -o mode=1777 shm "$R/dev/shm" || fail "/dev"
mount -t proc proc "$R/proc" && mount --rbind /sys "$R/sys" || fail "/proc, /sys"
mount --bind "$B" "$R/sandbox" || fail "/sandbox"
"""
SETUP_FAILED = zygote.SETUP_FAILED


@functools.cache
def isolation() -> str:
    """'namespaces' where the student process can be isolated as described above, else 'process'."""
    if os.name != "posix" or os.geteuid() != 0 or not all(shutil.which(t) for t in ("unshare", "chroot", "mount")):
        return "process"
    probe = subprocess.run(
        [
            "unshare",
            "--mount",
            "--pid",
            "--fork",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            "mount -t tmpfs none /mnt",
        ],
        capture_output=True,
    )
    return "namespaces" if probe.returncode == 0 else "process"


def describe_isolation() -> str:
    if isolation() == "namespaces":
        return "student code runs in a sandbox (own user, own file tree, own process namespace)"
    reason = "not running as root" if os.name == "posix" and os.geteuid() != 0 else "no Linux namespaces here"
    return (
        f"student code runs in a separate process with your permissions ({reason}); "
        "grade for credit as root or in the container"
    )


def _inside(path: Path, parent: Path) -> bool:
    return path.resolve().is_relative_to(parent.resolve())


def _binds() -> list:
    """Directories outside the system folders the student process needs: Python and its packages."""
    wanted = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    wanted |= {Path(d).resolve() for d in zygote.site_dirs()}
    system = [Path(d) for d in ("/usr", "/bin", "/lib", "/lib64", "/etc")]
    kept = sorted(p for p in wanted if not any(_inside(p, s) for s in system))
    kept = [p for p in kept if not any(q != p and _inside(p, q) for q in kept)]
    # A virtual environment reached through a symlink must also be found by that path: Python looks
    # for pyvenv.cfg beside the unresolved executable.
    aliases = {Path(p).absolute() for p in (sys.prefix, sys.exec_prefix)}
    return [str(p) for p in kept] + sorted(str(p) for p in aliases if p != p.resolve())


def _become_subreaper() -> None:
    """Processes the student's process leaves behind (detached, in sessions of their own) become this
    process's children, so that _kill_orphans finds them; in a PID namespace they die with it anyway."""
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_CHILD_SUBREAPER = 36
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _kill_orphans() -> None:
    """Kill and reap every child of this process except the zygote: while grading, the only others
    are what a student's process left behind."""
    zygotes = {zygote.RUNNING.proc.pid} if zygote.RUNNING else set()
    for _ in range(10):
        children = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[1]) == os.getpid() and int(stat.parent.name) not in zygotes:
                children.append(int(stat.parent.name))
        if not children:
            return
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass


def _free_uid() -> int:
    """A user id no process uses now: the sandbox's own user."""
    used = set()
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            used |= {int(line.split()[1]) for line in status.read_text().splitlines() if line.startswith("Uid:")}
        except (OSError, ValueError, IndexError):
            pass
    uid = 60000 + os.getpid() % 4000
    while uid in used:
        uid += 1
    return uid


def _copy_regular(src: Path, dst: Path, limit: int = MAX_STUDENT_FILE) -> int:
    """Copy a student's regular file (never a link: it could point at anything on this machine) of
    at most `limit` bytes; the bytes copied (0 when skipped)."""
    if src.is_symlink() or not src.is_file() or src.stat().st_size > limit:
        return 0
    data = src.read_bytes()
    dst.write_bytes(data)
    dst.chmod(0o644)
    return len(data)


def compile_cache_for(target: Path) -> Path:
    """Where the compiled kernels of one target are kept between its grading runs (on a GPU only;
    never when grading for credit, where every student starts from an empty cache)."""
    digest = hashlib.sha256(str(Path(target).resolve()).encode()).hexdigest()[:16]
    home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return home / "flash-attention-course" / "triton" / digest


def _copy_tree(src: Path, dst: Path, uid: int | None = None, budget: int = MAX_COMPILE_CACHE) -> None:
    """Copy the regular files under src to dst (links and anything else are skipped), at most
    `budget` bytes; owned by `uid` when given."""
    for folder, subfolders, files in os.walk(src):  # never follows a link to a folder
        subfolders[:] = [f for f in subfolders if not os.path.islink(os.path.join(folder, f))]
        here = dst / os.path.relpath(folder, src)
        here.mkdir(parents=True, exist_ok=True)
        if uid is not None:
            os.chown(here, uid, uid)
        for name in files:
            copied = _copy_regular(Path(folder) / name, here / name, limit=budget)
            budget -= copied
            if copied and uid is not None:
                os.chown(here / name, uid, uid)


class Sandbox:
    """The folder a student's processes see: runtime/common (the student runtime), course/<folder>/
    (a read-only copy of the student's exercise files) and scratch/ (theirs to write).

    With `compile_cache` (a folder of this machine), the Triton cache of the student's processes
    starts as a copy of it and is copied back when the sandbox is removed: a second grading run of
    the same files compiles nothing. The cache holds what this target's own processes wrote, so it
    is only ever given back to the same target."""

    def __init__(self, target: Path, folders, compile_cache: Path | None = None):
        self.isolated = isolation() == "namespaces"
        self.base = Path(tempfile.mkdtemp(prefix="course-sandbox-"))
        self.base.chmod(0o755)
        self.uid = _free_uid() if self.isolated else os.getuid()
        runtime = self.base / "runtime" / "common"
        runtime.mkdir(parents=True)
        for name in RUNTIME_FILES:
            _copy_regular(ROOT / "common" / name, runtime / name)
        for folder in folders:
            self._copy_exercise(Path(target) / folder, self.base / "course" / folder)
        self.scratch = self.base / "scratch"
        self.scratch.mkdir(mode=0o700)
        (self.base / "root").mkdir()
        if self.isolated:
            os.chown(self.scratch, self.uid, self.uid)
        self.compile_cache = compile_cache
        if compile_cache is not None and compile_cache.is_dir():
            _copy_tree(compile_cache, self.scratch / ".triton", self.uid if self.isolated else None)

    def _copy_exercise(self, src: Path, dst: Path) -> None:
        dst.mkdir(parents=True)
        if src.is_dir() and not src.is_symlink():
            for path in src.iterdir():
                _copy_regular(path, dst / path.name)

    def student_path(self, path: Path) -> str:
        """Where `path` (inside the sandbox folder) is seen from the student's process."""
        return str(Path("/sandbox") / path.relative_to(self.base)) if self.isolated else str(path)

    def remove(self) -> None:
        """Delete the sandbox, keeping its Triton cache first if it has a compile cache."""
        cache, kept = self.compile_cache, self.scratch / ".triton"
        if cache is not None and kept.is_dir() and not kept.is_symlink():
            cache.parent.mkdir(parents=True, exist_ok=True)
            fresh = Path(tempfile.mkdtemp(prefix=".new-", dir=cache.parent))
            _copy_tree(kept, fresh)
            shutil.rmtree(cache, ignore_errors=True)
            fresh.rename(cache)
        shutil.rmtree(self.base, ignore_errors=True)


class StudentProcess:
    """One disposable process serving one exercise's functions; restarted after it dies."""

    def __init__(self, sandbox: Sandbox, exercise, device: str):
        self.sandbox, self.exercise, self.device = sandbox, exercise, device
        self.proc: zygote.Forked | None = None
        self.import_failure: Exception | None = None  # set once: an import that fails or hangs is charged once
        self.deadline: float | None = None
        self.limit = 120.0
        self.log: io.BufferedRandom | None = None
        self.log_read = 0

    # ------------------------------------------------------------------ lifecycle
    def _start(self) -> None:
        _become_subreaper()
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        self.log = open(self.sandbox.scratch / f"output-{self.exercise.number}.log", "a+b")  # noqa: SIM115
        box = self.sandbox
        request = {
            "serve": box.student_path(box.base / "runtime" / "common" / "serve.py"),
            "cwd": box.student_path(box.scratch),
            "env": self._environment(),
            "sandbox": None,
        }
        if box.isolated:
            os.chown(self.log.name, box.uid, box.uid)
            request["sandbox"] = {
                "script": _SETUP,
                "root": str(box.base / "root"),
                "base": str(box.base),
                "uid": box.uid,
                "binds": _binds(),
            }
        try:
            self.proc = zygote.start(self.device).fork(request, (req_r, rep_w, self.log.fileno()))
        finally:
            os.close(req_r)
            os.close(rep_w)
        self.requests, self.replies = req_w, rep_r
        self._exchange(
            {
                "op": "load",
                "course": box.student_path(box.base / "course"),
                "folder": self.exercise.folder,
                "module": self.exercise.module,
                "kernels_only": self.exercise.kernels_only,
            },
            [],
            loading=True,
        )

    def _environment(self) -> dict:
        home = self.sandbox.student_path(self.sandbox.scratch)
        env = zygote.student_environment(self.device) | {
            "HOME": home,
            "TMPDIR": "/tmp" if self.sandbox.isolated else home,
            "TRITON_CACHE_DIR": f"{home}/.triton",
            "USER": "student",
            "LOGNAME": "student",
        }  # the sandbox user has no passwd entry: getpass asks these
        if self.sandbox.isolated:
            env["COURSE_SANDBOX_USER"] = "1"  # a user of its own: its process count can be capped
        if self.device == "cuda":
            env[ONE_CONFIG] = "1"  # one autotuning config per kernel, compiled once and never timed
        return env

    def stop(self) -> None:
        """Kill the process and, with it, everything it started."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=60)
        _kill_orphans()
        for fd in (self.requests, self.replies):
            os.close(fd)
        self.proc = None

    def close(self) -> None:
        """End the process: it leaves by itself when its request pipe closes, or is killed 5 s later."""
        if self.proc is not None:
            os.close(self.requests)
            self.requests = os.open(os.devnull, os.O_RDONLY)  # stop() closes it
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self.stop()
        if self.log:
            self.log.close()
            self.log = None

    # ------------------------------------------------------------------ calls
    def call(self, fn: str, args, kwargs, guarded=False, folder=None, module=None, backward=None):
        """The decoded reply of a call: (value, launches, ops computed by torch, problems, files).
        Raises StudentCodeFailed, MissingFunction-like LookupError, or ProcessEnded."""
        if self.import_failure is not None:
            raise self.import_failure
        if self.proc is None:  # starting (importing torch, triton, the module) is not charged to the check
            started = time.monotonic()
            self._start()
            if self.deadline is not None:
                self.deadline += time.monotonic() - started
        payloads: list[bytes] = []
        request = {
            "op": "call",
            "fn": fn,
            "folder": folder,
            "module": module,
            "guarded": guarded,
            "device": self.device,
            "args": wire.encode(list(args), payloads),
            "kwargs": wire.encode(dict(kwargs), payloads),
        }
        if backward is not None:
            request |= {"backward": True, "grad": wire.encode(backward, payloads)}
        return self._exchange(request, payloads)

    def _exchange(self, request: dict, payloads: list, loading=False):
        deadline = time.monotonic() + self.limit if loading or self.deadline is None else self.deadline
        try:
            wire.send(self.requests, request, payloads)
            reply, data = wire.receive(self.replies, deadline, sizes_of=_reply_sizes)
        except (wire.Timeout, wire.Closed, wire.ProtocolError, BrokenPipeError) as exc:
            failure = self._ended(exc, loading)
            if loading:
                self.import_failure = failure
            raise failure from None
        if not reply.get("ok") and isinstance(reply.get("missing"), str):
            raise MissingFunction(
                f"{self.exercise.folder}/{self.exercise.module}.py does not define {reply['missing'][:100]}()"
            )
        if not reply.get("ok"):
            error = StudentCodeFailed(reply.get("error") if isinstance(reply.get("error"), dict) else {})
            if loading:
                self.stop()
                self.import_failure = error
            raise error
        if loading:
            return None
        files = reply.get("files") if isinstance(reply.get("files"), dict) else {}
        try:
            value = wire.decode(reply.get("value"), data, self.device)
            contents = {str(k): wire.decode(v, data, "cpu") for k, v in files.items()}
        except wire.ProtocolError as exc:
            self.stop()
            raise ProcessEnded(f"the student process sent a malformed reply ({exc})") from None
        return Reply(
            value,
            _count(reply.get("launches")),
            _strings(reply.get("computed")),
            _strings(reply.get("problems")),
            {k: bytes(v.numpy()) if v is not None else None for k, v in contents.items()},
            reply.get("peak_extra") if type(reply.get("peak_extra")) is int else None,
        )

    def _ended(self, exc, loading: bool) -> "ProcessEnded":
        timed_out = isinstance(exc, wire.Timeout)
        returncode = None
        if not timed_out and self.proc is not None:
            try:
                returncode = self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self.stop()
        phase = "importing your module" if loading else "this call"
        if isinstance(exc, wire.ProtocolError):
            return ProcessEnded(
                f"the student process broke the grader's protocol during {phase} ({exc}); "
                "did your code write to the grader's pipes?"
            )
        return ProcessEnded(why_it_died(returncode, timed_out, self.limit, self.sandbox.isolated, phase))

    def printed(self) -> str:
        """What the student's code printed since the last time this was asked (bounded)."""
        if self.log is None:
            return ""
        size = os.fstat(self.log.fileno()).st_size
        text = os.pread(self.log.fileno(), OUTPUT_SHOWN, self.log_read).decode(errors="replace")
        more = size - self.log_read - OUTPUT_SHOWN
        self.log_read = size
        return text + (f"\n... ({more} more bytes not shown)" if more > 0 else "")


class Reply:
    def __init__(self, value, launches, computed, problems, files, peak_extra=None):
        self.value, self.launches, self.computed, self.problems, self.files = value, launches, computed, problems, files
        self.peak_extra = peak_extra  # bytes, on a GPU (common.harness.Outcome.peak_extra)


def _reply_sizes(reply: dict) -> list:
    return wire.tensor_sizes([reply.get("value"), reply.get("files")])


def _count(value) -> int:
    return value if type(value) is int and value >= 0 else 0


def _strings(values) -> list:
    return [str(v)[:2000] for v in values][:20] if isinstance(values, list) else []


def why_it_died(returncode, timed_out: bool, limit: float, isolated: bool, phase: str) -> str:
    if isolated and returncode == SETUP_FAILED:
        return "the grader could not build the sandbox for your code (its output is above); please report this"
    if timed_out:
        return (
            f"timed out after {limit:.0f} s during {phase}: the kernel (or your Python code) never finished. "
            "Usual causes: a loop whose bound never ends (e.g. stepping by 0, or a while loop), "
            "or a grid far larger than the problem. In the interpreter, a store outside its tensor "
            "can also corrupt memory and hang the process: check every mask."
        )
    signum = (
        -returncode
        if returncode is not None and returncode < 0
        else (returncode - 128 if isolated and returncode is not None and 128 < returncode < 160 else None)
    )
    if signum:
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        return (
            f"your process was killed by {name} during {phase}. "
            "Usual cause: a load or store outside its tensor (check every mask and offset)."
        )
    return (
        f"your process exited (status {returncode}) during {phase}: did your code call exit() "
        "or os._exit()? The grader needs it to return."
    )
