"""GPU autotuning for the attention kernels (the interpreter runs one fixed config)."""

import inspect
import os

import torch

ONE_CONFIG = "COURSE_ONE_CONFIG"  # "1" while a grader checks correctness: try one config, not the fastest


def autotune(configs, key, prune):
    """`triton.autotune` over `configs`, keyed on `key`, with `prune(configs, named_args, **kwargs)`
    choosing the configs worth trying for each call (e.g. `shared_memory_pruner`).

    When the grader checks correctness it sets COURSE_ONE_CONFIG=1: then only the first config left
    after pruning is tried, so each kernel compiles once per shape class instead of once per config,
    and no time goes into timing configs that would all give the same answer."""

    import triton  # here, not at the top: the grader reads ONE_CONFIG before the interpreter is set up

    def early_prune(configs, named_args, **kwargs):
        kept = prune(configs, named_args, **kwargs)
        return kept[:1] if os.environ.get(ONE_CONFIG) == "1" else kept

    # The winner of each tuning is written to Triton's cache: the next process that sees the same
    # kernel and shapes (a second grading run, a re-run benchmark) launches it without timing again.
    cache = {"cache_results": True} if "cache_results" in inspect.signature(triton.autotune).parameters else {}
    return triton.autotune(configs=configs, key=key, prune_configs_by={"early_config_prune": early_prune}, **cache)


def shared_memory_pruner(resident: str, streamed: str, n_resident: int, n_streamed: int):
    """An `early_config_prune` for a kernel whose program keeps `n_resident` tiles of
    [config[resident], HEAD_DIM] on chip and streams `n_streamed` tiles of
    [config[streamed], HEAD_DIM] through `num_stages` pipeline buffers.

    Keeps the configs whose streamed block is at most the resident one (the causal split needs
    one to divide the other) and whose tiles fit in this GPU's shared memory (a T4 has 64 KB, an
    RTX 4090 about 100 KB, an A100 163 KB, an H100 227 KB). If none fits, the smallest is shrunk
    until it does: fewer pipeline stages first, then smaller blocks (16 rows at least).
    """

    def prune(configs, named_args, **kwargs):
        q = named_args["q_ptr"]
        head_dim = kwargs["HEAD_DIM"]
        shared_memory = torch.cuda.get_device_properties(q.device).shared_memory_per_block_optin

        def bytes_needed(rows_resident, rows_streamed, stages):
            tiles = n_resident * rows_resident + n_streamed * stages * rows_streamed
            return tiles * head_dim * q.element_size()

        def fits(c):
            return bytes_needed(c.kwargs[resident], c.kwargs[streamed], c.num_stages) <= shared_memory

        kept = [c for c in configs if c.kwargs[streamed] <= c.kwargs[resident] and fits(c)]
        if kept:
            return kept
        smallest = min(configs, key=lambda c: bytes_needed(c.kwargs[resident], c.kwargs[streamed], c.num_stages))
        rows_resident, rows_streamed, stages = smallest.kwargs[resident], smallest.kwargs[streamed], smallest.num_stages
        while bytes_needed(rows_resident, rows_streamed, stages) > shared_memory:
            if stages > 1:
                stages -= 1
            elif rows_streamed > 16:
                rows_streamed //= 2
            elif rows_resident > 16:
                rows_resident //= 2
            else:
                break
        import triton

        blocks = smallest.kwargs | {resident: rows_resident, streamed: min(rows_streamed, rows_resident)}
        return [triton.Config(blocks, num_warps=min(smallest.num_warps, 4), num_stages=stages)]

    return prune
