"""The student's side of the grader: a disposable process that imports the student's exercise and
serves calls to its functions.

The grader (grader/sandbox.py) starts it in a sandbox holding only the student's files and this
runtime, and talks to it over two pipes (common.wire): it sends input tensors and the function to
call, and receives the returned tensors with what the call launched and computed
(common.harness). Scores, references, seeds and reports never exist in this process.

    python -I -S serve.py REQUEST_FD REPLY_FD
"""

import os
import resource
import sys
from pathlib import Path
from types import ModuleType

RUNTIME = Path(__file__).resolve().parent.parent  # the folder holding this `common` package


def _limit_resources() -> None:
    """Caps that a student's code cannot raise again: file size (a flood of output), core dumps and,
    for a sandbox user of its own, processes and threads (a fork bomb)."""
    limits = [(resource.RLIMIT_FSIZE, 64 << 20), (resource.RLIMIT_CORE, 0)]
    if os.environ.get("COURSE_SANDBOX_USER"):
        limits.append((resource.RLIMIT_NPROC, 256))
    for limit, value in limits:
        resource.setrlimit(limit, (value, value))


def _import_path() -> None:
    """This runtime first, then the installed packages; nothing of the course repository itself."""
    import site

    sys.path[:] = [str(RUNTIME)] + [p for p in sys.path if "-packages" not in p and p != str(RUNTIME / "common")]
    for directory in filter(None, os.environ.get("COURSE_SITE_DIRS", "").split(os.pathsep)):
        site.addsitedir(directory)
    # an editable install of the course would map `grader` and `common` back to the repository
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__.lower()]
    sys.path[:] = [p for p in sys.path if "__editable__" not in p]


class Missing(Exception):
    """The student's module does not define the function asked for."""


class Server:
    def __init__(self, request_fd: int, reply_fd: int):
        from common import wire

        self.wire, self.request_fd, self.reply_fd = wire, request_fd, reply_fd
        self.modules: dict[str | None, ModuleType] = {}  # None: the exercise's own module
        self.kernels_only = True
        self.scratch = Path.cwd()

    def reply(self, header: dict, payloads=()) -> None:
        self.wire.send(self.reply_fd, header, payloads)

    def failure(self, exc: BaseException) -> dict:
        from common.harness import describe_exception

        return {"ok": False, "error": describe_exception(exc, [RUNTIME])}

    def serve(self) -> None:
        while True:
            try:
                request, payloads = self.wire.receive(self.request_fd, sizes_of=self._sizes)
            except self.wire.Closed:
                return
            handler = getattr(self, f"op_{request.get('op')}")
            try:
                self.reply(*handler(request, payloads))
            except Missing as exc:
                self.reply({"ok": False, "missing": str(exc)})
            except BaseException as exc:  # noqa: BLE001 - SystemExit, KeyboardInterrupt too: report, go on
                self.reply(self.failure(exc))

    def _sizes(self, request):
        return self.wire.tensor_sizes(
            [request.get("args"), request.get("kwargs"), request.get("inputs"), request.get("grad")]
        )

    def op_load(self, request, payloads):
        from common.loader import load_module, use_course

        self.course = Path(request["course"])
        use_course(self.course)
        self.kernels_only = bool(request["kernels_only"])
        self.modules[None] = load_module(self.course / request["folder"] / f"{request['module']}.py")
        return ({"ok": True},)

    def op_call(self, request, payloads):
        from common import harness

        files = {}
        device = request.get("device")
        markers = lambda kind, body, nested: self._marker(kind, body, nested, files)  # noqa: E731
        args = self.wire.decode(request["args"], payloads, device, markers, margin=True)
        kwargs = self.wire.decode(request["kwargs"], payloads, device, markers, margin=True)
        fn = self._function(request.get("folder"), request.get("module"), request["fn"])
        if request.get("backward"):
            grad = self.wire.decode(request["grad"], payloads, device, margin=True)
            call = lambda *a, **kw: harness.forward_backward(fn, a, grad, kw)  # noqa: E731
        else:
            call = fn
        outcome = harness.invoke(
            call, args, kwargs, guarded=bool(request.get("guarded")), kernels_only=self.kernels_only
        )
        out = []
        header = {
            "ok": True,
            "value": self.wire.encode(outcome.value, out),
            "launches": outcome.launches,
            "computed": outcome.computed,
            "problems": outcome.problems,
            "peak_extra": outcome.peak_extra,
            "files": {name: self._read_output(path, out) for name, path in files.items()},
        }
        return header, out

    def _function(self, folder, module, name):
        if folder is not None and folder not in self.modules:
            from common.loader import load_exercise

            self.modules[folder] = load_exercise(folder)
        fn = getattr(self.modules[folder], name, None)
        if not callable(fn):
            raise Missing(name)
        return fn

    def _marker(self, kind, body, nested, files):
        if kind == "fixture":
            from common import fixtures

            return getattr(fixtures, body["name"])(**nested(body["params"]))
        if kind == "outfile":
            path = self.scratch / "outputs" / Path(body).name
            path.parent.mkdir(exist_ok=True)
            path.unlink(missing_ok=True)
            files[body] = path
            return str(path)
        raise ValueError(f"unknown marker {kind}")

    def _read_output(self, path: Path, out: list):
        import torch

        if not path.is_file():
            return None
        return self.wire.encode(torch.frombuffer(bytearray(path.read_bytes()), dtype=torch.uint8), out)


def main() -> None:
    request_fd, reply_fd = int(sys.argv[1]), int(sys.argv[2])
    _limit_resources()
    _import_path()
    from common import env

    env.setup()
    import warnings

    # The interpreter computes masked-off lanes too (exp of -inf, 0/0) and numpy warns about them.
    warnings.filterwarnings("ignore", module="triton.runtime.interpreter")
    warnings.filterwarnings("ignore", category=RuntimeWarning, module="numpy")
    Server(request_fd, reply_fd).serve()


if __name__ == "__main__":
    main()
