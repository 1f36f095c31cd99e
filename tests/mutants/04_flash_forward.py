from tests.mutants import Mutant

MUTANTS = [
    # The popular blog kernel: causal attention visits only the diagonal block.
    Mutant("diagonal_only_causal", "offs_m, offs_d, 0, split, N", "offs_m, offs_d, 0, split * (1 - CAUSAL), N",
           fails=("causal_many_blocks",), says="diagonal"),
    Mutant("acc_not_rescaled", "acc = acc * alpha[:, None]", "acc = acc * 1.0",
           fails=("aligned", "ragged"), says="rescale"),
    Mutant("no_boundary_mask", "visible = keys[None, :] < N", "visible = keys[None, :] >= 0",
           fails=("ragged",), says="padded keys"),
    Mutant("log2e_not_folded", "s2 = tl.dot(q, kt) * qk_scale", "s2 = tl.dot(q, kt) * (qk_scale / 1.4426950408889634)",
           fails=("aligned", "causal_many_blocks"), says="log2(e)"),
    Mutant("lse_in_base_2", "lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453", "lse = m_i + tl.math.log2(l_i)",
           fails=("lse_output",), says="base 2"),
    Mutant("padded_keys_loaded_as_minus_inf", "kt = tl.load(kt_ptrs, mask=keys[None, :] < N, other=0.0)",
           "kt = tl.load(kt_ptrs, mask=keys[None, :] < N, other=float(\"-inf\"))",
           fails=("ragged",), says="NaN"),
    Mutant("causal_mask_off_by_one", "visible = visible & (keys[None, :] <= offs_m[:, None])",
           "visible = visible & (keys[None, :] < offs_m[:, None])",
           fails=("causal_one_block", "causal_many_blocks"), says="NaN"),
]
