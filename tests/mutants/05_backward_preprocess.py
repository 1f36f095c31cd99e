from tests.mutants import Mutant

MUTANTS = [
    Mutant(
        "sum_over_rows", "do.to(tl.float32), axis=1)", "do.to(tl.float32), axis=0)", fails=("head_dims",), says="axis"
    ),
    Mutant(
        "tail_rows_not_stored",
        "row_ok = offs_m < N\n",
        "row_ok = offs_m < N - N % BLOCK_M\n",
        fails=("ragged",),
        says="store mask",
    ),
    Mutant(
        "do_with_o_strides",
        "*o.stride(), *do.stride(),",
        "*o.stride(), *o.stride(),",
        fails=("strided_inputs",),
        says="strides",
    ),
    Mutant(
        "no_head_offset_for_delta",
        "tl.store(delta_ptr + off_bh.to(tl.int64) * N + offs_m",
        "tl.store(delta_ptr + offs_m",
        fails=("aligned", "ragged"),
        says="(batch, head)",
    ),
    Mutant(
        "summed_in_fp16",
        "tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=1)",
        "tl.sum(o * do, axis=1).to(tl.float32)",
        fails=("aligned", "ragged", "bf16_inputs"),  # bf16_inputs: on a GPU only
        says="summed in",
    ),
    # Stores past N land in the next head's rows, or past the end of delta: caught by the guard zones.
    Mutant(
        "tail_store_unmasked",
        "offs_m, delta, mask=row_ok)",
        "offs_m, delta)",
        fails=("ragged",),
        says="stored outside its output tensor",
    ),
]
