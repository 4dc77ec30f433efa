"""Memory blocks for the large CPU gradients of the package's store kernels, handed out again once
nothing else holds them.

A downsample's backward writes a gradient the size of its input (the (1,3,1200,1300) float32 step:
18.7 MB). Allocated from glibc at each step, the block lands where the heap has room: in a
compiled training step often at a fresh address whose pages glibc gave back to the system when it
trimmed its heap, so the kernel's zero fill first faults them in (4570 pages) and writes memory
no cache holds. Eager's step, making the same allocations in another order around other small
ones, keeps its gradient at two or three addresses. Served from these blocks, the compiled step
takes no page faults and its fill writes memory the caches still hold (AMD EPYC Zen 5, the
(1,3,1200,1300)->(200,300) step, medians of interleaved rounds in three processes: 1.40-1.58x
eager's step at 2 threads and 1.36-1.49x at 1, where from glibc it measured 0.51-1.30x;
docs/findings.md, finding 3).

``empty_strided`` is what the generated code calls for such a buffer
(``lowerings.cpu_blocks``): a tensor of the requested size and strides over a block's memory, from
a free block of that key where there is one. The tensor comes through DLPack
(``torch.from_dlpack``), so it has a storage of its own, not the block's (not a view, no
``_base``), and that storage holds a view of the block until it is freed: a block is free when no
such view is left, whatever tensors or storage objects the user keeps of the gradient. Each key
(size, stride, dtype) keeps at most ``BLOCKS_PER_KEY`` blocks, the most recently used
``MAX_KEYS`` keys are kept, and ``clear`` (called by ``decomps.uninstall``) drops them all: at
most ``BLOCKS_PER_KEY * MAX_KEYS`` blocks stay allocated between steps. Buffers under
``MIN_BYTES``, and those of a key whose blocks are all held, come from the allocator as before.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import torch

# Below this the allocator serves the buffer without trimming the heap around it (glibc's mmap and
# trim thresholds start at 128 KB): the (1,3,500,400) float32 steps' 2.4 MB gradients take no
# page faults.
MIN_BYTES = 4 << 20
# Two: a gradient stolen into a leaf's .grad holds one block while the next step's is written.
BLOCKS_PER_KEY = 2
MAX_KEYS = 4

_lock = threading.Lock()
# key -> [(block, its storage's use count while nothing outside holds it)]
_blocks: OrderedDict[tuple, list[tuple[torch.Tensor, int]]] = OrderedDict()


def _use_count(block: torch.Tensor) -> int:
    return torch._C._storage_Use_Count(block.untyped_storage()._cdata)


def _over(block: torch.Tensor, size, stride, dtype: torch.dtype) -> torch.Tensor:
    # the DLPack capsule holds this view of the block until the tensor's storage is freed
    return torch.from_dlpack(block.view(dtype).as_strided(size, stride))


def empty_strided(size, stride, dtype: torch.dtype) -> torch.Tensor:
    """``torch.empty_strided(size, stride, dtype=dtype)`` on the CPU, from a free block where one
    of this key is free, uninitialized either way."""
    size, stride = tuple(size), tuple(stride)
    span = 1 + sum((n - 1) * s for n, s in zip(size, stride)) if all(size) else 0
    nbytes = span * dtype.itemsize
    if nbytes < MIN_BYTES:
        return torch.empty_strided(size, stride, dtype=dtype)
    key = (size, stride, dtype)
    with _lock:
        blocks = _blocks.setdefault(key, [])
        _blocks.move_to_end(key)
        for block, free in blocks:
            if _use_count(block) == free:
                return _over(block, size, stride, dtype)
        if len(blocks) == BLOCKS_PER_KEY:
            return torch.empty_strided(size, stride, dtype=dtype)
        block = torch.empty(nbytes, dtype=torch.uint8)
        blocks.append((block, _use_count(block)))
        while len(_blocks) > MAX_KEYS:
            _blocks.popitem(last=False)
        # under the lock: until its view exists, another thread would find the new block free
        return _over(block, size, stride, dtype)


def held_bytes() -> int:
    """Bytes of the blocks kept, free or not."""
    with _lock:
        return sum(block.numel() for blocks in _blocks.values() for block, _ in blocks)


def clear() -> None:
    """Drop every block: held ones stay with their tensors, free ones go back to the allocator."""
    with _lock:
        _blocks.clear()
