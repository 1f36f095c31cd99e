"""Time FlashAttention kernels against torch SDPA on a GPU: `python -m common.benchmark`.

FLOPs convention: forward 4*B*H*N^2*d (halved when causal), backward 2.5x the forward.
Each timing is the median of triton.testing.do_bench; SDPA backends are pinned one at a time, so
the table says which one ran.
"""

import argparse
import sys
from pathlib import Path

from common import env

ROOT = Path(__file__).resolve().parent.parent


def flops(B, H, N, d, causal, backward=False):
    forward = 4 * B * H * N * N * d / (2 if causal else 1)
    return forward * (2.5 if backward else 1.0)


def load_course(target: Path):
    """The forward, the three backward pieces, from a course directory (solutions/ by default)."""
    from grader.loader import load_module

    fwd = load_module(target / "04_flash_forward" / "flash_forward.py")
    pre = load_module(target / "05_backward_preprocess" / "backward_preprocess.py")
    dkdv = load_module(target / "06_backward_dkdv" / "backward_dkdv.py")
    dq = load_module(target / "07_backward_dq" / "backward_dq.py")
    return fwd.flash_attention_forward, pre.attention_backward_preprocess, dkdv.attention_backward_dkdv, dq.attention_backward_dq


def sdpa_runner(backend_name):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    backend = None if backend_name == "default" else getattr(SDPBackend, backend_name)

    def run(q, k, v, causal):
        if backend is None:
            return scaled_dot_product_attention(q, k, v, is_causal=causal)
        with sdpa_kernel(backend):
            return scaled_dot_product_attention(q, k, v, is_causal=causal)

    return run


def measure(B, H, N, d, causal, target: Path, dtype_name="float16"):
    """Rows (implementation, direction, ms, TFLOPS) for one shape."""
    import torch
    from triton.testing import do_bench

    dtype = getattr(torch, dtype_name)
    forward, preprocess, dkdv, dq = load_course(target)
    q, k, v, do = (torch.randn(B, H, N, d, device="cuda", dtype=dtype) for _ in range(4))
    rows = []

    def add(name, direction, fn, **kw):
        ms = do_bench(fn, return_mode="median", **kw)
        rows.append((name, direction, ms, flops(B, H, N, d, causal, direction == "bwd") / ms / 1e9))

    add("course (solutions)", "fwd", lambda: forward(q, k, v, causal))
    o, lse = forward(q, k, v, causal)

    def course_backward():
        delta = preprocess(o, do)
        dkdv(q, k, v, do, lse, delta, causal)
        dq(q, k, v, do, lse, delta, causal)

    add("course (solutions)", "bwd", course_backward)
    for backend in ("default", "FLASH_ATTENTION"):
        run = sdpa_runner(backend)
        name = f"torch SDPA {backend.lower()}"
        add(name, "fwd", lambda: run(q, k, v, causal))
        qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
        out = run(qg, kg, vg, causal)
        add(name, "bwd", lambda: out.backward(do, retain_graph=True), grad_to_none=[qg, kg, vg])
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m common.benchmark", description=__doc__.splitlines()[0])
    p.add_argument("--target", default=str(ROOT / "solutions"), help="course directory with exercises 04-07")
    p.add_argument("--shape", action="append", default=None, metavar="B,H,N,d",
                   help="shape to time (repeatable); default 4,32,4096,64")
    args = p.parse_args(argv)
    mode = env.setup()
    if not mode.gpu:
        print("benchmarks need a CUDA GPU (the interpreter is for correctness only)", file=sys.stderr)
        return 2
    print(f"{mode.description}; {env.versions()}; fp16; median of triton.testing.do_bench")
    print(f"{'B,H,N,d':<16} {'causal':<7} {'implementation':<26} {'dir':<4} {'ms':>8} {'TFLOPS':>8}")
    for shape in args.shape or ["4,32,4096,64"]:
        B, H, N, d = (int(x) for x in shape.split(","))
        for causal in (False, True):
            for name, direction, ms, tflops in measure(B, H, N, d, causal, Path(args.target)):
                print(f"{shape:<16} {str(causal):<7} {name:<26} {direction:<4} {ms:>8.3f} {tflops:>8.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
