"""`python exercises/04_flash_forward/flash_forward.py`: a quick test of one exercise file.

Each exercise file ends with `selftest.main()` under `if __name__ == "__main__":`. Run as a
script on a machine without a CUDA GPU, the script starts again with the Triton interpreter turned
on (TRITON_INTERPRET=1: nothing to set by hand); then the file is loaded, its function is called on small inputs and the largest error against the float64
reference is printed, with the tolerance the grader would allow. It grades nothing: `make grade EX=04`
does.
"""

import os
import sys
import time
from pathlib import Path

import torch

from common import reference
from common.tolerance import allowed_error, max_error


def main() -> None:
    """Test the file run as a script; in a notebook (no script) do nothing."""
    import __main__

    if not getattr(__main__, "__file__", None):
        return
    path = Path(__main__.__file__).resolve()
    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        # Triton was imported without the interpreter: start again with it on.
        os.environ["TRITON_INTERPRET"] = "1"
        os.execv(sys.executable, [sys.executable, str(path)])
    from common.loader import load_module

    device = "cuda" if torch.cuda.is_available() else "cpu"
    mode = "GPU" if device == "cuda" else "CPU, Triton interpreter"
    print(f"{path.parent.name}/{path.name} on small inputs ({mode}):")
    module = load_module(path)
    test = TESTS.get(path.stem)
    if test is None:
        print("  (no self-test for this file)")
        return
    start = time.perf_counter()
    try:
        test(module, device)
    except Exception as exc:  # noqa: BLE001 - show the student what went wrong, briefly
        text = str(exc).strip().splitlines()
        print(f"  raised {type(exc).__name__}: {text[0] if text else ''}")
        return
    print(f"  ({time.perf_counter() - start:.1f} s). For the grade: make grade EX={path.parent.name[:2]}")


def _report(name, out, ref, lowp, dtype):
    err = max_error(out.detach().cpu(), ref.detach().cpu())
    bad = bool(torch.isnan(out).any())
    tol = allowed_error(ref.detach().double().cpu(), lowp.detach().cpu(), dtype)
    verdict = "NaN in the output" if bad else ("ok" if err <= tol else "TOO FAR")
    print(f"  {name:<34} max error {err:9.3g}   allowed {tol:9.3g}   {verdict}")


def _randn(*shape, dtype=torch.float16, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype=dtype, device=device)


def _matmul(m, device):
    a, b = (
        _randn(100, 70, dtype=torch.float32, device=device),
        _randn(70, 90, dtype=torch.float32, device=device, seed=1),
    )
    _report(
        "matmul 100x70 @ 70x90 (fp32)",
        m.matmul(a, b),
        reference.matmul(a, b),
        reference.matmul_lowp(a, b),
        torch.float32,
    )


def _softmax(m, device):
    x = _randn(37, 300, dtype=torch.float32, device=device) * 30
    x[3] = -torch.inf
    _report(
        "softmax 37x300, large values", m.softmax(x), reference.softmax(x), reference.softmax_lowp(x), torch.float32
    )


def _online_softmax(m, device):
    x = _randn(37, 300, dtype=torch.float32, device=device) * 30
    y, lse = m.online_softmax(x)
    ref_y, ref_lse = reference.online_softmax(x)
    low_y, low_lse = reference.online_softmax_lowp(x)
    _report("online_softmax y 37x300", y, ref_y, low_y, torch.float32)
    _report("online_softmax lse", lse, ref_lse, low_lse, torch.float32)


def _qkv(device, n=100, d=64):
    return [_randn(2, 2, n, d, device=device, seed=s) for s in range(4)]


def _forward(m, device):
    q, k, v, _ = _qkv(device)
    for causal in (False, True):
        o, lse = m.flash_attention_forward(q, k, v, causal=causal)
        ref_o, ref_lse = reference.attention(q, k, v, causal)
        low_o, low_lse = reference.attention_lowp(q, k, v, causal)
        _report(f"o, N=100, causal={causal}", o, ref_o, low_o, q.dtype)
        _report(f"lse, N=100, causal={causal}", lse, ref_lse, low_lse, torch.float32)


def _preprocess(m, device):
    o, do = _qkv(device)[:2]
    _report(
        "delta, N=100",
        m.attention_backward_preprocess(o, do),
        reference.attention_delta(o, do),
        reference.attention_delta_lowp(o, do),
        o.dtype,
    )


def _stats(q, k, v, do, causal):
    o, lse = reference.attention(q, k, v, causal)
    return lse.float(), reference.attention_delta(o, do).float()


def _dkdv(m, device):
    q, k, v, do = _qkv(device)
    for causal in (False, True):
        dk, dv = m.attention_backward_dkdv(q, k, v, do, *_stats(q, k, v, do, causal), causal=causal)
        ref, low = reference.attention_grads(q, k, v, do, causal), reference.attention_grads_lowp(q, k, v, do, causal)
        _report(f"dV, N=100, causal={causal}", dv, ref[2], low[2], q.dtype)
        _report(f"dK, N=100, causal={causal}", dk, ref[1], low[1], q.dtype)


def _dq(m, device):
    q, k, v, do = _qkv(device)
    for causal in (False, True):
        dq = m.attention_backward_dq(q, k, v, do, *_stats(q, k, v, do, causal), causal=causal)
        ref, low = reference.attention_grads(q, k, v, do, causal), reference.attention_grads_lowp(q, k, v, do, causal)
        _report(f"dQ, N=100, causal={causal}", dq, ref[0], low[0], q.dtype)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    o = m.flash_attention(*leaves, causal=True)
    o.backward(do)
    ref, low = reference.attention_grads(q, k, v, do, True), reference.attention_grads_lowp(q, k, v, do, True)
    for name, t, r, lw in zip(("q", "k", "v"), leaves, ref, low):
        _report(f"flash_attention {name}.grad, causal", t.grad, r, lw, q.dtype)


TESTS = {
    "matmul": _matmul,
    "safe_softmax": _softmax,
    "online_softmax": _online_softmax,
    "flash_forward": _forward,
    "backward_preprocess": _preprocess,
    "backward_dkdv": _dkdv,
    "backward_dq": _dq,
}
