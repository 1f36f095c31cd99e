from tests.mutants import Mutant, cast_to_fixed_fp16, lse_not_converted, sm_scale_ignored

EVERY_CHECK = ("dv", "dk", "ragged", "causal_one_block", "causal_many_blocks", "strides_and_head_dims", "custom_scale")

MUTANTS = [
    # Triton's tutorial bug: the causal mask applied whatever `causal` says.
    Mutant(
        "noncausal_masked",
        "start_m, offs_n, offs_d, N, qk_scale, BLOCK_M, False)",
        "start_m, offs_n, offs_d, N, qk_scale, BLOCK_M, True)",
        fails=("dv", "dk", "ragged", "strides_and_head_dims", "custom_scale"),
        says="causal=False",
    ),
    # dV stays right: only the dk check loses its points; the others grade dV and say so.
    Mutant(
        "dk_scale_missing",
        "dk *= sm_scale\n",
        "dk *= 1.0\n",
        fails=("dk",),
        says="sm_scale is missing on dK",
        only=True,
    ),
    Mutant(
        "delta_not_subtracted",
        "dsT = pT * (dpT - delta[None, :])",
        "dsT = pT * dpT",
        fails=("dk",),
        says="delta is not subtracted",
        only=True,
    ),
    # With a single block the unmasked diagonal is the whole causal mask missing: both are named "mask".
    Mutant(
        "diagonal_unmasked",
        "start_m, offs_n, offs_d, N, qk_scale, BLOCK_M, True)",
        "start_m, offs_n, offs_d, N, qk_scale, BLOCK_M, False)",
        fails=("causal_one_block", "causal_many_blocks"),
        says="mask",
        only=True,
    ),
    Mutant(
        "diagonal_skipped",
        "for start_m in range(start_n, start_n + BLOCK_N, BLOCK_M):",
        "for start_m in range(start_n + BLOCK_N, start_n + BLOCK_N, BLOCK_M):",
        fails=("causal_one_block", "causal_many_blocks"),
        says="diagonal",
        only=True,
    ),
    # Triton's tutorial limitation: num_steps = (N - start_m) // BLOCK_M drops the partial last block.
    Mutant(
        "ragged_tail_dropped",
        "for start_m in range(lo, N, BLOCK_M):",
        "for start_m in range(lo, N - BLOCK_M + 1, BLOCK_M):",
        fails=("ragged",),
        says="last query block",
        only=True,
    ),
    lse_not_converted(EVERY_CHECK),
    Mutant(
        "mask_hides_diagonal",
        "offs_m[None, :] >= offs_n[:, None]",
        "offs_m[None, :] > offs_n[:, None]",
        fails=("causal_one_block", "causal_many_blocks"),
        says="diagonal",
        only=True,
    ),
    Mutant(
        "strides_ignored",
        "*q.stride(), *k.stride(), *v.stride(), *do.stride(),",
        "*dk.stride(), *dk.stride(), *dk.stride(), *dk.stride(),",
        fails=("strides_and_head_dims",),
        says="strides are ignored",
        only=True,
    ),
    # One layout for every tensor would hide this: dO read with q's strides.
    Mutant(
        "do_read_with_q_strides",
        "*q.stride(), *k.stride(), *v.stride(), *do.stride(),",
        "*q.stride(), *k.stride(), *v.stride(), *q.stride(),",
        fails=("strides_and_head_dims",),
        says="do is read with the strides of q",
        only=True,
    ),
    sm_scale_ignored("custom_scale"),
    Mutant(
        "dv_store_unmasked",
        "dv.to(dv_ptr.dtype.element_ty), mask=key_ok)",
        "dv.to(dv_ptr.dtype.element_ty))",
        fails=("ragged",),
        says="stored outside its output tensor",
    ),
    cast_to_fixed_fp16("dk += tl.dot(dsT.to(q.dtype), q)"),
]
