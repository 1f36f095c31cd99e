from tests.mutants import Mutant

MUTANTS = [
    # The popular blog kernel: causal attention visits only the diagonal block.
    Mutant("diagonal_only_causal", "offs_m, offs_d, 0, split, N", "offs_m, offs_d, 0, split * (1 - CAUSAL), N",
           fails=("causal_many_blocks", "head_dims"), says="diagonal"),
    Mutant("acc_not_rescaled", "acc = acc * alpha[:, None]", "acc = acc * 1.0",
           fails=("aligned", "ragged"), says="rescale"),
    Mutant("no_boundary_mask", "visible = keys[None, :] < N", "visible = keys[None, :] >= 0",
           fails=("ragged",), says="padded keys"),
    Mutant("log2e_not_folded", "s2 = tl.dot(q, kt) * qk_scale", "s2 = tl.dot(q, kt) * (qk_scale / 1.4426950408889634)",
           fails=("aligned", "causal_many_blocks"), says="log2(e)"),
    Mutant("lse_in_base_2", "lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453", "lse = m_i + tl.math.log2(l_i)",
           fails=("lse_output",), says="base 2"),
    # j < i hides row 0's only key: its running max stays -inf and exp2(-inf - (-inf)) = NaN.
    Mutant("causal_mask_off_by_one", "visible = visible & (keys[None, :] <= offs_m[:, None])",
           "visible = visible & (keys[None, :] < offs_m[:, None])",
           fails=("causal_one_block", "causal_many_blocks"), says="NaN"),
    Mutant("strides_ignored", "*q.stride(), *k.stride(), *v.stride(), *o.stride(),",
           "*o.stride(), *o.stride(), *o.stride(), *o.stride(),", fails=("strided_inputs",), says="strides are ignored"),
    Mutant("o_store_unmasked", "o.to(o_ptr.dtype.element_ty), mask=row_ok)", "o.to(o_ptr.dtype.element_ty))",
           fails=("ragged",), says="stored outside its output tensor"),
    Mutant("running_max_not_subtracted", "m_new = tl.maximum(m_i, tl.max(s2, 1))",
           "m_new = tl.maximum(m_i, tl.max(s2, 1)) * 0.0", fails=("large_scores",), says="overflow"),
    # Given code, but the bug students make in their own wrappers: the default scale always wins.
    Mutant("sm_scale_argument_ignored", "sm_scale = 1.0 / math.sqrt(d) if sm_scale is None else float(sm_scale)",
           "sm_scale = 1.0 / math.sqrt(d)", fails=("custom_scale",), says="sm_scale argument is ignored"),
]
