"""Memory blocks for the large CPU buffers of the package's kernels, handed out again once nothing
else holds them.

PyTorch's CPU allocator is glibc's, which maps an allocation of 32 MB or more afresh at each call
and gives smaller ones back to the system when it trims its heap: each such buffer's kernel then
first faults its pages in, 4 KB at a time, and writes memory no cache holds. The x2
(1,256,128,128) float32 channels-last forward's 64 MB output takes 16385 faults per call in eager,
in stock's compiled call and in the package's (18.0 ms per call at 2 threads on an AMD EPYC Zen 5,
2.0 ms for ATen's kernel into an output it keeps). A downsample's backward writes a gradient the
size of its input (the (1,3,1200,1300) float32 step: 18.7 MB), which a compiled training step
often gets at a fresh address where eager's keeps its gradient at two or three: from glibc the
compiled step measured 0.51-1.30x eager's, from blocks 1.40-1.58x at 2 threads and 1.36-1.49x at
1 (medians of interleaved rounds in three processes; docs/findings.md, finding 3).

``empty_strided`` is what the generated code calls for such a buffer
(``lowerings.cpu_blocks``): a tensor of the requested size and strides over a block's memory, from
a free block of that key where there is one. The tensor comes through DLPack
(``torch.from_dlpack``), so it has a storage of its own, not the block's (not a view, no
``_base``), and that storage holds a view of the block until it is freed: a block is free when no
such view is left, whatever tensors or storage objects the user keeps of the buffer. Each key
(size, stride, dtype) keeps at most ``BLOCKS_PER_KEY`` blocks, the most recently used
``MAX_KEYS`` keys are kept, blocks of at most ``MAX_BYTES`` in all, and ``clear`` (called by
``decomps.uninstall``) drops them all. Buffers under ``MIN_BYTES``, and those that the limits
leave out (a key whose blocks are all held, a block over the bytes left), come from the allocator
as before.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import torch

# Below this the allocator serves the buffer without trimming the heap around it (glibc's mmap and
# trim thresholds start at 128 KB): the (1,3,500,400) float32 steps' 2.4 MB gradients take no
# page faults.
MIN_BYTES = 4 << 20
# glibc's largest mmap threshold on 64-bit: an allocation of this size or more is mapped afresh
# at every call. ``lowerings.cpu_blocks`` sends the package's buffers from this size here (the
# plain store's gradients, measured to fault from the heap, from MIN_BYTES); below it glibc
# recycles its heap's memory across a step's buffers, which separate blocks would not share.
MAPPED_BYTES = 32 << 20
# Two: a gradient stolen into a leaf's .grad holds one block while the next step's is written.
BLOCKS_PER_KEY = 2
MAX_KEYS = 4
# The x4 (1,256,128,128)->(512,512) float32 output, the matrix's largest, is 268 MB.
MAX_BYTES = 1 << 30

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
    if not MIN_BYTES <= nbytes <= MAX_BYTES:
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
        # the least recently used other keys make room (this key is the most recent)
        while len(_blocks) > 1 and (len(_blocks) > MAX_KEYS or _kept_bytes() + nbytes > MAX_BYTES):
            _blocks.popitem(last=False)
        if _kept_bytes() + nbytes > MAX_BYTES:  # this key's held blocks leave no room
            return torch.empty_strided(size, stride, dtype=dtype)
        block = torch.empty(nbytes, dtype=torch.uint8)
        blocks.append((block, _use_count(block)))
        # under the lock: until its view exists, another thread would find the new block free
        return _over(block, size, stride, dtype)


def _kept_bytes() -> int:
    return sum(block.numel() for blocks in _blocks.values() for block, _ in blocks)


def held_bytes() -> int:
    """Bytes of the blocks kept, free or not."""
    with _lock:
        return _kept_bytes()


def clear() -> None:
    """Drop every block: held ones stay with their tensors, free ones go back to the allocator."""
    with _lock:
        _blocks.clear()
