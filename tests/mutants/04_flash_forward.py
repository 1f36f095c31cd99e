from tests.mutants import Mutant, cast_to_fixed_fp16, sm_scale_ignored

MUTANTS = [
    # The popular blog kernel: causal attention visits only the diagonal block.
    Mutant(
        "diagonal_only_causal",
        "offs_m, offs_d, 0, split, N",
        "offs_m, offs_d, 0, split * (1 - CAUSAL), N",
        fails=("causal_many_blocks",),
        says="diagonal",
        only=True,
    ),
    Mutant(
        "acc_not_rescaled",
        "acc = acc * alpha[:, None]",
        "acc = acc * 1.0",
        fails=("online_softmax",),
        says="rescale",
        only=True,
    ),
    Mutant(
        "l_not_rescaled",
        "l_i = l_i * alpha + tl.sum(p, 1)",
        "l_i = l_i + tl.sum(p, 1)",
        fails=("online_softmax",),
        says="alpha",
        only=True,
    ),
    # Every output is off, so every check fails; the simplest case names the cause.
    Mutant(
        "o_not_divided_by_l",
        "o = acc / l_i[:, None]",
        "o = acc",
        fails=(
            "online_softmax",
            "ragged",
            "causal_one_block",
            "causal_many_blocks",
            "scale_convention",
            "strides_and_head_dims",
        ),
        says="never divided by l_i",
    ),
    Mutant(
        "no_boundary_mask",
        "visible = keys[None, :] < N",
        "visible = keys[None, :] >= 0",
        fails=("ragged",),
        says="padded keys",
        only=True,
    ),
    Mutant(
        "log2e_not_folded",
        "qk_scale = sm_scale * LOG2E",
        "qk_scale = sm_scale",
        fails=("online_softmax", "scale_convention", "causal_many_blocks"),
        says="log2(e)",
    ),
    Mutant(
        "lse_in_base_2",
        "lse = (m_i + tl.math.log2(l_i)) / LOG2E",
        "lse = m_i + tl.math.log2(l_i)",
        fails=("lse_output",),
        says="base 2",
        only=True,
    ),
    # j < i hides row 0's only key: its running max stays -inf and exp2(-inf - (-inf)) = NaN.
    Mutant(
        "causal_mask_off_by_one",
        "visible = visible & (keys[None, :] <= offs_m[:, None])",
        "visible = visible & (keys[None, :] < offs_m[:, None])",
        fails=("causal_one_block", "causal_many_blocks"),
        says="j <= i",
    ),
    Mutant(
        "strides_ignored",
        "*q.stride(), *k.stride(), *v.stride(), *o.stride(),",
        "*o.stride(), *o.stride(), *o.stride(), *o.stride(),",
        fails=("strides_and_head_dims",),
        says="strides are ignored",
        only=True,
    ),
    # One layout for every tensor would hide this: k read with q's strides.
    Mutant(
        "k_read_with_q_strides",
        "*q.stride(), *k.stride(), *v.stride(), *o.stride(),",
        "*q.stride(), *q.stride(), *v.stride(), *o.stride(),",
        fails=("strides_and_head_dims",),
        says="k is read with the strides of q",
        only=True,
    ),
    Mutant(
        "o_store_unmasked",
        "o.to(o_ptr.dtype.element_ty), mask=row_ok)",
        "o.to(o_ptr.dtype.element_ty))",
        fails=("ragged",),
        says="stored outside its output tensor",
    ),
    Mutant(
        "running_max_not_subtracted",
        "m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)",
        "m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale) * 0.0",
        fails=("online_softmax",),
        says="overflow",
        only=True,
    ),
    sm_scale_ignored("scale_convention"),
    cast_to_fixed_fp16("acc = tl.dot(p.to(v.dtype), v, acc)"),
    Mutant(
        "scores_materialised",
        "    lse = torch.empty((B, H, N), dtype=torch.float32, device=q.device)\n",
        "    lse = torch.empty((B, H, N), dtype=torch.float32, device=q.device)\n"
        "    scores = torch.empty((B, H, N, N), dtype=torch.float32, device=q.device)  # kept to inspect\n",
        fails=("memory_linear",),  # on a GPU only
        says="N x N",
    ),
]
