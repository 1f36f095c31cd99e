from tests.mutants import Mutant, cast_to_fixed_fp16, lse_not_converted, sm_scale_ignored

DQ_CHECKS = ("dq", "ragged", "causal", "strides_and_head_dims", "custom_scale", "autograd")

MUTANTS = [
    # Triton's tutorial bug: the causal mask applied whatever `causal` says.
    Mutant(
        "noncausal_masked",
        "if MASKED:\n        visible = key_ok[None, :]\n        if CAUSAL:",
        "if True:\n        visible = key_ok[None, :]\n        if True:",
        fails=("dq", "ragged", "strides_and_head_dims", "custom_scale", "autograd"),
        says="causal=False",
    ),
    # A slip in dQ's core: the checks of the other ideas say "fix dq first"; the assembly still earns its points.
    Mutant("dq_scale_missing", "dq *= sm_scale\n", "dq *= 1.0\n", fails=DQ_CHECKS, says="sm_scale is missing on dQ"),
    Mutant(
        "delta_not_subtracted",
        "ds = p * (dp - delta[:, None])",
        "ds = p * dp",
        fails=DQ_CHECKS,
        says="delta is not subtracted",
    ),
    Mutant(
        "diagonal_unmasked",
        "start_n, offs_m, offs_d, N, qk_scale, BLOCK_N, True, CAUSAL)",
        "start_n, offs_m, offs_d, N, qk_scale, BLOCK_N, False, CAUSAL)",
        fails=("causal", "autograd"),
        says="mask",
    ),
    # The blog's causal kernel: only the diagonal block.
    Mutant(
        "keys_left_of_diagonal_skipped",
        "for start_n in range(0, split, BLOCK_N):",
        "for start_n in range(split if CAUSAL else 0, split, BLOCK_N):",
        fails=("causal",),
        says="diagonal",
    ),
    # Padded keys get P = exp(0 - lse): harmless times K = 0, unless it overflows fp16 (inf * 0 = NaN).
    Mutant(
        "ragged_tail_unmasked",
        "visible = key_ok[None, :]",
        "visible = offs_n[None, :] >= 0",
        fails=("ragged",),
        says="padded key",
        only=True,
    ),
    lse_not_converted(DQ_CHECKS),
    Mutant(
        "strides_ignored",
        "*q.stride(), *k.stride(), *v.stride(), *do.stride(), *dq.stride(),",
        "*dq.stride(), *dq.stride(), *dq.stride(), *dq.stride(), *dq.stride(),",
        fails=("strides_and_head_dims",),
        says="strides are ignored",
        only=True,
    ),
    Mutant(
        "k_read_with_q_strides",
        "*q.stride(), *k.stride(), *v.stride(), *do.stride(), *dq.stride(),",
        "*q.stride(), *q.stride(), *v.stride(), *do.stride(), *dq.stride(),",
        fails=("strides_and_head_dims",),
        says="k is read with the strides of q",
        only=True,
    ),
    # Every (batch, head) works on batch 0: invisible with B = 1 (the cases of the other ideas), caught by the
    # plain and layout cases (B = H = 2) and by the re-grade of 04-07, which uses B = H = 2.
    Mutant(
        "batch_offset_ignored",
        "    off_b = (off_bh // H).to(tl.int64)\n    off_h = (off_bh % H).to(tl.int64)\n    k_base",
        "    off_b = (off_bh * 0).to(tl.int64)\n    off_h = (off_bh % H).to(tl.int64)\n    k_base",
        fails=("dq", "strides_and_head_dims"),
        says="(batch, head)",
    ),
    # The assembled autograd function: the kernels are right, the plumbing is not.
    Mutant(
        "backward_returns_dk_dv_swapped",
        "return dq, dk, dv, None, None",
        "return dq, dv, dk, None, None",
        fails=("assembly", "autograd"),
        says="order of forward's inputs",
    ),
    Mutant(
        "causal_not_passed_to_backward",
        "dk, dv = dkdv(q, k, v, do, lse, delta, ctx.causal, ctx.sm_scale)",
        "dk, dv = dkdv(q, k, v, do, lse, delta, False, ctx.sm_scale)",
        fails=("assembly", "autograd"),
        says="causal on from forward",
    ),
    sm_scale_ignored("custom_scale"),
    cast_to_fixed_fp16("dq += tl.dot(ds.to(k.dtype), k)"),
]
