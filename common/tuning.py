"""GPU autotuning helpers for the attention kernels (the interpreter runs one fixed config)."""

import torch


def shared_memory_pruner(resident: str, streamed: str, n_resident: int, n_streamed: int):
    """An `early_config_prune` for a kernel whose program keeps `n_resident` tiles of
    [config[resident], HEAD_DIM] on chip and streams `n_streamed` tiles of
    [config[streamed], HEAD_DIM] through `num_stages` pipeline buffers.

    Keeps the configs whose streamed block is at most the resident one (the causal split needs
    one to divide the other) and whose tiles fit in this GPU's shared memory (consumer cards have
    about 100 KB, Hopper about 227 KB); if none fits, the smallest.
    """

    def prune(configs, named_args, **kwargs):
        q = named_args["q_ptr"]
        head_dim = kwargs["HEAD_DIM"]
        shared_memory = torch.cuda.get_device_properties(q.device).shared_memory_per_block_optin

        def bytes_needed(c):
            tiles = n_resident * c.kwargs[resident] + n_streamed * c.num_stages * c.kwargs[streamed]
            return tiles * head_dim * q.element_size()

        kept = [c for c in configs if c.kwargs[streamed] <= c.kwargs[resident] and bytes_needed(c) <= shared_memory]
        return kept or [min(configs, key=bytes_needed)]

    return prune
