from tests.mutants import Mutant

MUTANTS = [
    Mutant(
        "k_tail_dropped",
        "for k0 in range(0, K, BLOCK_K):",
        "for k0 in range(0, K - BLOCK_K + 1, BLOCK_K):",
        fails=("ragged_shapes", "fp16_inputs"),
        says="last K step",
    ),
    Mutant(
        "store_unmasked_rows",
        "mask=(rows[:, None] < M) & (cols[None, :] < N))",
        "mask=cols[None, :] < N)",
        fails=("ragged_shapes",),
        says="stored outside its output tensor",
    ),
    Mutant(
        "strides_ignored",
        "a_ptr + rows[:, None] * stride_am + k[None, :] * stride_ak",
        "a_ptr + rows[:, None] * K + k[None, :]",
        fails=("transposed_views",),
        says="strides are ignored",
    ),
    Mutant(
        "b_tile_transposed",
        "b_ptr + k[:, None] * stride_bk + cols[None, :] * stride_bn",
        "b_ptr + k[:, None] * stride_bn + cols[None, :] * stride_bk",
        fails=("aligned_fp32",),
        says="every element",
    ),
    # Loads masked on rows and columns only: the last K step reads past the inputs.
    Mutant(
        "loads_not_masked_along_k",
        "mask=(rows[:, None] < M) & (k[None, :] < K), other=0.0)\n"
        "        b = tl.load(b_ptr + k[:, None] * stride_bk + cols[None, :] * stride_bn,\n"
        "                    mask=(k[:, None] < K) & (cols[None, :] < N), other=0.0)",
        "mask=rows[:, None] < M, other=0.0)\n"
        "        b = tl.load(b_ptr + k[:, None] * stride_bk + cols[None, :] * stride_bn,\n"
        "                    mask=cols[None, :] < N, other=0.0)",
        fails=("ragged_shapes", "fp16_inputs", "transposed_views", "many_tiles"),
        says="not masked along K",
    ),
    # The sum kept in the output dtype (rounded after every K step): invisible on short reductions.
    Mutant(
        "fp16_accumulation",
        "acc += tl.dot(a, b)",
        "acc = (acc + tl.dot(a, b)).to(c_ptr.dtype.element_ty).to(tl.float32)",
        fails=("fp16_inputs",),
        says="low precision",
    ),
    Mutant("grid_rows_only", "pid_n = tl.program_id(1)", "pid_n = 0", fails=("many_tiles", "aligned_fp32"), says="NaN"),
]
