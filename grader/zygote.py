"""A warm start for student processes: one process imports torch and triton once, then forks a
fresh copy of itself for every student process the grader asks for.

Importing torch and triton costs seconds of CPU time per process; a fork costs milliseconds. The
zygote holds nothing of the grader's: grader/sandbox.py starts it from a clean interpreter
(`python -I -S -B zygote.py FD`) with the student processes' environment, and it imports only the
packages, never the course, a seed or a student's file. A fork closes the zygote's socket and
every other descriptor first, then becomes the student process as a fresh interpreter would have:
in a sandbox of its own where the grader asks for one (new mount and PID namespaces, read-only
binds, chroot, a user of its own), else a plain process in its own session.

The socket (a Unix SOCK_SEQPACKET pair) carries one JSON message per step. The grader sends
{"serve": ..., "cwd": ..., "env": {...}, "sandbox": null | {...}} with three descriptors (request
pipe, reply pipe, output log); the zygote answers {"pid": n}, and {"exited": n, "status": code}
when that process ends (negative: killed by that signal, as subprocess reports it). Standard
library only at the top: this file runs outside the course's packages, and the grader imports it
before torch.
"""

import json
import os
import select
import site
import socket
import subprocess
import sys
import time

SETUP_FAILED = 125  # the sandbox could not be built (grader/sandbox.py explains it)
CLONE_NEWNS, CLONE_NEWPID = 0x00020000, 0x20000000
MS_REC, MS_PRIVATE = 0x4000, 1 << 18
PR_SET_PDEATHSIG = 1


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    _libc().prctl(PR_SET_PDEATHSIG, 9)  # the grader gone, the zygote goes too
    if os.environ.get("COURSE_COLD_START") != "1":  # "1": each process imports the packages after the fork
        _import_packages()
    sock.send(json.dumps({"ready": True}).encode())
    while True:
        if select.select([sock], [], [], 0.05)[0]:
            message, fds, _, _ = socket.recv_fds(sock, 1 << 16, 3)
            if not message:
                return  # the grader closed its end
            pid = os.fork()
            if pid == 0:
                sock.close()
                os._exit(_become_student(json.loads(message), *fds))
            for fd in fds:
                os.close(fd)
            sock.send(json.dumps({"pid": pid}).encode())
        _report_exits(sock)


def _import_packages() -> None:
    import site

    for directory in filter(None, os.environ.get("COURSE_SITE_DIRS", "").split(os.pathsep)):
        site.addsitedir(directory)
    import numpy  # noqa: F401
    import torch  # noqa: F401
    import triton  # noqa: F401
    import triton.language  # noqa: F401


def _report_exits(sock) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        sock.send(json.dumps({"exited": pid, "status": os.waitstatus_to_exitcode(status)}).encode())


def _libc():
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


# ----------------------------------------------------------------------------- in the fork
def _become_student(request: dict, request_fd: int, reply_fd: int, log_fd: int) -> int:
    """Runs in the forked child; returns its exit status."""
    os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    keep = sorted({request_fd, reply_fd})
    os.closerange(3, keep[0])
    os.closerange(keep[0] + 1, keep[-1])
    os.closerange(keep[-1] + 1, os.sysconf("SC_OPEN_MAX"))
    os.environ.clear()
    os.environ.update(request["env"])
    if request["sandbox"] is None:
        os.chdir(request["cwd"])
        return _serve(request["serve"], request_fd, reply_fd)
    return _sandboxed(request, request_fd, reply_fd)


def _serve(serve: str, request_fd: int, reply_fd: int) -> int:
    """Run common/serve.py as `python serve.py REQUEST_FD REPLY_FD` would."""
    import runpy

    sys.argv = [serve, str(request_fd), str(reply_fd)]
    try:
        runpy.run_path(serve, run_name="__main__")
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - shown in the output log, like an interpreter would
        import traceback

        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    return code


def _sandboxed(request: dict, request_fd: int, reply_fd: int) -> int:
    """New mount and PID namespaces; their init builds the file tree (the grader's shell script)
    and starts the server chrooted, as the sandbox user; this process waits for the init."""
    box, libc = request["sandbox"], _libc()
    if libc.unshare(CLONE_NEWNS | CLONE_NEWPID) != 0 or libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None):
        print(f"the grader could not build the sandbox: unshare or mount failed (errno {_errno()})", file=sys.stderr)
        return SETUP_FAILED
    init = os.fork()
    if init == 0:
        os._exit(_init(box, request, request_fd, reply_fd))
    os.close(request_fd)
    os.close(reply_fd)
    return _exit_code(os.waitpid(init, 0)[1])


def _init(box: dict, request: dict, request_fd: int, reply_fd: int) -> int:
    """PID 1 of the namespace. It stays root and outside the chroot, only reaps; when it ends, the
    kernel kills every process left in the namespace. (The server is not PID 1 itself: an init
    ignores signals it has no handler for, and a student's own signal must be delivered.)"""
    _libc().prctl(PR_SET_PDEATHSIG, 9)
    root, uid = box["root"], box["uid"]
    built = subprocess.run(["/bin/sh", "-c", box["script"], "sh", root, box["base"], *box["binds"]], check=False)
    if built.returncode != 0:
        return SETUP_FAILED
    server = os.fork()
    if server == 0:
        os.chroot(root)
        os.chdir(request["cwd"])
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        os._exit(_serve(request["serve"], request_fd, reply_fd))
    os.close(request_fd)
    os.close(reply_fd)
    while True:  # reap whatever the namespace's orphans leave, until the server itself ends
        pid, status = os.wait()
        if pid == server:
            return _exit_code(status)


def _exit_code(status: int) -> int:
    """An exit status a parent can pass on: 128 + n for a process killed by signal n, as a shell does."""
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def _errno() -> int:
    import ctypes

    return ctypes.get_errno()


# ----------------------------------------------------------------------------- the grader's side
def site_dirs() -> list:
    """The folders of Python's packages (the zygote adds them to its path: it starts with -S)."""
    dirs = set(site.getsitepackages()) | {p for p in sys.path if "-packages" in p}
    return sorted(d for d in dirs if os.path.isdir(d))


def student_environment(device: str) -> dict:
    """The environment every student process on `device` ("cuda" or "cpu") starts from: the zygote's.
    On a CPU it switches the Triton interpreter on, which triton reads when it is imported (its own
    library functions are kernels too)."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
        "HOME": "/nonexistent",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "COURSE_SITE_DIRS": os.pathsep.join(site_dirs()),
        # "1": each process imports the packages itself, after the fork. Importing them never sets
        # up CUDA (each student process does that after its fork), so the warm fork is the default.
        "COURSE_COLD_START": os.environ.get("COURSE_COLD_START", "0"),
    }
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    for name in ("CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "OMP_NUM_THREADS", "CUDA_HOME"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def likely_device() -> str:
    """The device the grader will choose (common.env.setup), guessed without importing torch: "cpu"
    where the interpreter is forced or no NVIDIA GPU is visible. A wrong guess costs only time: the
    grader then starts the zygote it needs."""
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES") in ("", "-1")
    if os.environ.get("TRITON_INTERPRET") == "1" or hidden or not os.path.exists("/dev/nvidiactl"):
        return "cpu"
    return "cuda"


class Zygote:
    """The grader's handle on a zygote process (see the top of this file)."""

    def __init__(self, environment: dict):
        self.environment = environment
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-B", __file__, str(theirs.fileno())],
            env=environment,
            cwd="/",
            stdin=subprocess.DEVNULL,
            pass_fds=(theirs.fileno(),),
        )
        theirs.close()
        self.sock = ours
        self.ready = False  # it says so once its imports are done; the first fork waits for that
        self.exited: dict[int, int] = {}  # pid: exit status

    def fork(self, request: dict, fds) -> "Forked":
        if not self.ready:
            self._receive("ready", time.monotonic() + 600)
            self.ready = True
        socket.send_fds(self.sock, [json.dumps(request).encode()], list(fds))
        return Forked(self, self._receive("pid", time.monotonic() + 60)["pid"])

    def wait(self, pid: int, timeout=None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while pid not in self.exited:
            self._receive("exited", deadline)
        return self.exited.pop(pid)

    def _receive(self, kind: str, deadline):
        """The next message of `kind`; exit reports met on the way are kept."""
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self.sock], [], [], left)[0]:
                assert left is not None  # select() without a timeout returns only when the socket is ready
                raise subprocess.TimeoutExpired(kind, left)
            data = self.sock.recv(1 << 16)
            if not data:
                raise RuntimeError(
                    f"the grader's zygote process ended (status {self.proc.wait()}); its error, if any, is above"
                )
            message = json.loads(data)
            if "exited" in message:
                self.exited[message["exited"]] = message["status"]
            if kind in message:
                return message


class Forked:
    """A student process forked by a Zygote: what the grader needs of subprocess.Popen."""

    def __init__(self, parent: Zygote, pid: int):
        self.parent, self.pid = parent, pid
        self.returncode: int | None = None

    def wait(self, timeout=None) -> int:
        if self.returncode is None:
            self.returncode = self.parent.wait(self.pid, timeout)
        return self.returncode


RUNNING: Zygote | None = None  # the one zygote, ended with the grader


def start(device: str) -> Zygote:
    """The running zygote for student processes on `device`, started if need be (one at a time: a
    zygote for another device is ended). It returns at once: the zygote imports in the background."""
    global RUNNING
    environment = student_environment(device)
    if RUNNING is not None and RUNNING.environment != environment:
        RUNNING.proc.kill()
        RUNNING = None
    if RUNNING is None or RUNNING.proc.poll() is not None:
        RUNNING = Zygote(environment)
    return RUNNING


if __name__ == "__main__":
    main()
