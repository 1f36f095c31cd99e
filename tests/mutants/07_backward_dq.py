from tests.mutants import Mutant

MUTANTS = [
    # Triton's tutorial bug: the causal mask applied whatever `causal` says.
    Mutant("noncausal_masked", "if MASKED:\n        visible = key_ok[None, :]\n        if CAUSAL:",
           "if True:\n        visible = key_ok[None, :]\n        if True:",
           fails=("aligned", "ragged"), says="causal=False"),
    Mutant("dq_scale_missing", "dq *= sm_scale\n", "dq *= 1.0\n", fails=("aligned", "causal"),
           says="sm_scale is missing on dQ"),
    Mutant("delta_not_subtracted", "ds = p * (dp - delta[:, None])", "ds = p * dp",
           fails=("aligned", "causal"), says="delta is not subtracted"),
    Mutant("diagonal_unmasked", "start_n, offs_m, offs_d, N, qk_scale, BLOCK_N, True, CAUSAL)",
           "start_n, offs_m, offs_d, N, qk_scale, BLOCK_N, False, CAUSAL)", fails=("causal",), says="mask"),
    # The blog's causal kernel: only the diagonal block.
    Mutant("keys_left_of_diagonal_skipped", "for start_n in range(0, split, BLOCK_N):",
           "for start_n in range(split if CAUSAL else 0, split, BLOCK_N):", fails=("causal", "head_dims"),
           says="diagonal"),
    # Padded keys get P = exp(0 - lse): harmless times K = 0, unless it overflows fp16 (inf * 0 = NaN).
    Mutant("ragged_tail_unmasked", "visible = key_ok[None, :]", "visible = offs_n[None, :] >= 0",
           fails=("large_scores",), says="padded key"),
    Mutant("lse_not_converted", "other=0.0) * LOG2E", "other=0.0)", fails=("aligned", "causal"), says="natural-log"),
    Mutant("strides_ignored", "*q.stride(), *k.stride(), *v.stride(), *do.stride(), *dq.stride(),",
           "*dq.stride(), *dq.stride(), *dq.stride(), *dq.stride(), *dq.stride(),", fails=("strided_inputs",),
           says="strides are ignored"),
    # The assembled autograd function: the kernels are right, the plumbing is not.
    Mutant("backward_returns_dk_dv_swapped", "return dq, dk, dv, None, None", "return dq, dv, dk, None, None",
           fails=("autograd_gradients", "finite_differences"), says="look at the assembly"),
    Mutant("causal_not_passed_to_backward", "dk, dv = dkdv(q, k, v, do, lse, delta, ctx.causal, ctx.sm_scale)",
           "dk, dv = dkdv(q, k, v, do, lse, delta, False, ctx.sm_scale)", fails=("autograd_gradients",),
           says="look at the assembly"),
    Mutant("sm_scale_argument_ignored", "sm_scale = 1.0 / math.sqrt(d) if sm_scale is None else float(sm_scale)",
           "sm_scale = 1.0 / math.sqrt(d)", fails=("custom_scale",), says="sm_scale argument is ignored"),
]
