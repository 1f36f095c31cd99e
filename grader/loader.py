"""The student's implementation as the checks see it.

`impl.softmax(x)` calls the student's function; `call(impl.softmax, x)` (common.compare) calls it
guarded. Where the function runs is the implementation's business:
- `RemoteImplementation`: in the student's sandboxed process (grader.sandbox), for every graded run;
- `LocalImplementation`: in the current process, for a notebook checking its own code as the
  student works (practice: scores for credit come from the grader's own run).
Either way a call returns plain tensors and data, after the same verdicts on what it did: an answer
computed by PyTorch outside a Triton kernel, a store outside the outputs or a modified input fails
the check with a message that says so.
"""

import torch

from common import harness
from common.compare import CheckFailed
from grader import ROOT
from grader.core import Fixture, MissingFunction, OutputFile, StudentCodeFailed, markers_in

RUNTIME_DIRS = (ROOT / "common", ROOT / "grader")  # frames there are the course's, not the student's


class StudentFunction:
    """One of the student's functions. Calling it runs it (unguarded: probes, timing)."""

    def __init__(self, impl, name: str, folder=None, module=None):
        self.impl, self.__name__, self.folder, self.module = impl, name, folder, module

    def __call__(self, *args, **kwargs):
        return self.impl.run(self, args, kwargs, guarded=False).value

    def guarded(self, *args, **kwargs):
        """Run it with NaN-filled, guarded outputs; it must launch a kernel and keep its inputs."""
        return self.impl.run(self, args, kwargs, guarded=True).value

    def with_backward(self, inputs, grad, **kwargs):
        """(out, *grads of inputs): out = fn(*inputs, **kwargs) with autograd, then out.backward(grad)."""
        return self.impl.run(self, inputs, kwargs, guarded=True, backward=grad).value

    def with_peak_memory(self, *args, **kwargs):
        """(value, bytes): run it unguarded; bytes is the GPU memory the call allocated at its peak
        beyond what was allocated before it (None without a GPU), measured where it ran."""
        reply = self.impl.run(self, args, kwargs, guarded=False)
        return reply.value, reply.peak_extra


class Implementation:
    """The functions of one exercise's module, as attributes."""

    def __init__(self, where: str, kernels_only: bool = True):
        self.where, self.kernels_only = where, kernels_only

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return StudentFunction(self, name)

    def exercise(self, folder: str, module: str):
        """Another exercise of the same student (07 grades the pieces it is built from)."""
        return _Sibling(self, folder, module)

    def run(self, fn: StudentFunction, args, kwargs, guarded: bool, backward=None):
        reply = self.execute(fn, args, kwargs, guarded, backward)
        verdict(fn.__name__, reply, guarded and self.kernels_only, self.kernels_only)
        return reply

    def execute(self, fn, args, kwargs, guarded, backward):
        raise NotImplementedError


class _Sibling:
    def __init__(self, impl, folder, module):
        self.impl, self.folder, self.module = impl, folder, module

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return StudentFunction(self.impl, name, self.folder, self.module)


def verdict(name: str, reply, launch_needed: bool, kernels_only: bool) -> None:
    """Fail the check when the call computed its answer outside a Triton kernel or misbehaved."""
    if kernels_only and reply.computed:
        ops = ", ".join(reply.computed[:5])
        raise CheckFailed(
            f"your {name} called {ops} outside a Triton kernel: compute the result in your kernel. "
            "Host code may only allocate (torch.empty*), view, copy or convert tensors."
        )
    if launch_needed and not reply.launches:
        raise CheckFailed(
            f"{name} returned without launching a Triton kernel: the exercise is to compute the result in "
            "your kernel (PyTorch-only answers earn no points)"
        )
    if reply.problems:
        raise CheckFailed(reply.problems[0])


class RemoteImplementation(Implementation):
    """Calls go to the student's process (grader.sandbox.StudentProcess)."""

    def __init__(self, process, where: str, kernels_only: bool = True):
        super().__init__(where, kernels_only)
        self.process = process

    def execute(self, fn, args, kwargs, guarded, backward):
        markers = markers_in([args, kwargs])
        reply = self.process.call(fn.__name__, args, kwargs, guarded, fn.folder, fn.module, backward)
        for marker in markers:
            marker.content = reply.files.get(marker.name)
        return reply


class LocalImplementation(Implementation):
    """Calls run here, on the functions of `namespace` (a notebook's globals)."""

    def __init__(self, namespace: dict, where: str, kernels_only: bool = True, siblings=None):
        super().__init__(where, kernels_only)
        self.namespace, self.siblings = namespace, siblings

    def execute(self, fn, args, kwargs, guarded, backward):
        import tempfile
        from pathlib import Path

        namespace = self.namespace if fn.folder is None else vars(self.siblings(fn.folder, fn.module))
        target = namespace.get(fn.__name__)
        if not callable(target):
            raise MissingFunction(f"{self.where} does not define {fn.__name__}()")
        with tempfile.TemporaryDirectory() as tmp:

            def resolve(value):
                if isinstance(value, Fixture):
                    from common import fixtures

                    return getattr(fixtures, value.name)(**resolve(value.params))
                if isinstance(value, OutputFile):
                    return str(Path(tmp) / Path(value.name).name)
                if isinstance(value, (list, tuple)):
                    return type(value)(resolve(v) for v in value)
                if isinstance(value, dict):
                    return {k: resolve(v) for k, v in value.items()}
                return value

            if backward is not None:
                target = _with_backward(target, backward)
            try:
                outcome = harness.invoke(target, resolve(list(args)), resolve(dict(kwargs)), guarded, self.kernels_only)
            except Exception as exc:  # the student's code raised: reported as the sandbox reports it
                raise StudentCodeFailed(harness.describe_exception(exc, RUNTIME_DIRS)) from None
            for marker in markers_in([args, kwargs]):
                path = Path(tmp) / Path(marker.name).name
                marker.content = path.read_bytes() if path.is_file() else None
        outcome.value = _plain(outcome.value)
        outcome.files = {}
        return outcome


def _with_backward(fn, grad):
    return lambda *inputs, **kwargs: harness.forward_backward(fn, inputs, grad, kwargs)


def _plain(value):
    """The value with every tensor a plain torch.Tensor: a subclass could redefine arithmetic."""
    if isinstance(value, torch.Tensor):
        if type(value) is not torch.Tensor:
            raise CheckFailed(
                f"your function returned a {type(value).__name__}, a subclass of torch.Tensor: "
                "return the plain tensor your kernel wrote"
            )
        return value.detach()
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return value
