"""decomps.block_pool: tensors over blocks handed out again once nothing else holds them, each
key's blocks and the keys bounded, dropped on ``clear`` and by ``decomps.uninstall``."""

from __future__ import annotations

import threading
import time

import pytest
import torch

import decomps
from decomps import block_pool

SIZE, STRIDE = (2, 3, 8, 8), (192, 64, 8, 1)


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    """Blocks from 1 KB (the module's threshold is 4 MB), an empty pool around each test."""
    monkeypatch.setattr(block_pool, "MIN_BYTES", 1024)
    block_pool.clear()
    yield
    block_pool.clear()


def _take(size=SIZE, stride=STRIDE, dtype=torch.float32):
    return block_pool.empty_strided(size, stride, dtype)


def test_a_free_block_is_handed_out_again():
    a = _take()
    assert a.shape == SIZE and a.stride() == STRIDE and a.dtype == torch.float32 and a._base is None
    ptr = a.data_ptr()
    del a
    b = _take()
    assert b.data_ptr() == ptr and block_pool.held_bytes() == 384 * 4


def test_held_blocks_are_not_handed_out():
    a = _take()
    a.fill_(1.0)
    b = _take()  # a is held: a second block
    assert b.data_ptr() != a.data_ptr() and block_pool.held_bytes() == 2 * 384 * 4
    c = _take()  # both held, the key full: an allocation of its own, not kept
    assert c.data_ptr() not in (a.data_ptr(), b.data_ptr()) and block_pool.held_bytes() == 2 * 384 * 4
    view, storage = a[0], b.untyped_storage()
    del a, b, c
    d = _take()  # a view holds the first block, a storage the second
    assert d.data_ptr() not in (view.data_ptr(), storage.data_ptr())
    assert torch.equal(view, torch.ones(3, 8, 8))
    del view, d
    assert _take().data_ptr() != storage.data_ptr()


def test_strides_dtype_and_small_buffers():
    channels_last = (192, 1, 24, 3)
    t = _take(stride=channels_last, dtype=torch.bfloat16)
    assert t.is_contiguous(memory_format=torch.channels_last) and t.dtype == torch.bfloat16
    before = block_pool.held_bytes()
    small = block_pool.empty_strided((4, 4), (4, 1), torch.float32)  # 64 bytes: not pooled
    assert small.shape == (4, 4) and block_pool.held_bytes() == before
    empty = block_pool.empty_strided((0, 5), (5, 1), torch.float32)
    assert empty.numel() == 0 and block_pool.held_bytes() == before


def test_least_recently_used_keys_are_dropped():
    keys = [(2, 3, 8, 8 + k) for k in range(block_pool.MAX_KEYS + 1)]
    ptrs = {}
    for size in keys:
        t = block_pool.empty_strided(size, torch.empty(size).stride(), torch.float32)
        ptrs[size] = t.data_ptr()
        del t
    assert len(block_pool._blocks) == block_pool.MAX_KEYS and keys[0] not in block_pool._blocks
    last = keys[-1]
    assert block_pool.empty_strided(last, torch.empty(last).stride(), torch.float32).data_ptr() == ptrs[last]


def test_bytes_are_bounded(monkeypatch):
    """Blocks of at most ``MAX_BYTES`` in all: a new block drops the least recently used other
    keys to make room; a buffer over the bound, or beside its key's held blocks that leave no
    room, is not kept."""
    one = 384 * 4
    monkeypatch.setattr(block_pool, "MAX_BYTES", 2 * one)
    first, second = (2, 3, 8, 8), (2, 3, 8, 8, 1)
    a = _take(first, STRIDE)
    del a
    b = _take(second, (*STRIDE, 1))
    assert block_pool.held_bytes() == 2 * one
    c = _take(second, (*STRIDE, 1))  # b held: a second block of its key, the first key dropped
    assert [key[0] for key in block_pool._blocks] == [second] and block_pool.held_bytes() == 2 * one
    big = block_pool.empty_strided((3 * 384,), (1,), torch.float32)
    assert big.numel() == 3 * 384 and block_pool.held_bytes() == 2 * one
    monkeypatch.setattr(block_pool, "MAX_BYTES", one + one // 2)
    block_pool.clear()
    d = _take(first, STRIDE)
    e = _take(first, STRIDE)  # d held, and beside it no room: not kept
    assert block_pool.held_bytes() == one and len({b.data_ptr(), c.data_ptr(), d.data_ptr(), e.data_ptr()}) == 4


def test_a_shared_buffer_leaves_its_block():
    """``share_memory_`` (what a DataLoader worker's result goes through) moves the tensor to
    shared memory with its values; the block is then free."""
    a = _take()
    a.copy_(torch.arange(384.0).view(SIZE))
    ptr = a.data_ptr()
    a.share_memory_()
    assert a.is_shared() and torch.equal(a, torch.arange(384.0).view(SIZE))
    assert _take().data_ptr() == ptr


def test_clear_keeps_held_tensors():
    a = _take()
    a.fill_(2.0)
    block_pool.clear()
    assert block_pool.held_bytes() == 0 and torch.equal(a, torch.full(SIZE, 2.0))
    assert _take().data_ptr() != a.data_ptr()


def test_threads_get_distinct_blocks(monkeypatch):
    """Each thread its own block, even where making a block's tensor takes a while (the view that
    marks a block taken is made under the lock)."""
    taken, barrier, over = [], threading.Barrier(4), block_pool._over

    def slow_over(*args):
        time.sleep(0.01)
        return over(*args)

    monkeypatch.setattr(block_pool, "_over", slow_over)

    def take():
        barrier.wait()
        taken.append(_take())

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({t.data_ptr() for t in taken}) == 4


def test_uninstall_drops_the_blocks():
    a = _take()
    del a
    assert block_pool.held_bytes() > 0
    with decomps.disabled():
        assert block_pool.held_bytes() == 0


def test_a_gradient_is_an_ordinary_tensor_but_for_growing_its_storage():
    """Written, saved and shrunk as any tensor; its storage (from DLPack) does not grow."""
    import io

    a = _take()
    a.zero_().add_(1.5)
    buffer = io.BytesIO()
    torch.save(a, buffer)
    buffer.seek(0)
    assert torch.equal(torch.load(buffer), a)
    a.resize_(2, 3, 8, 4)
    with pytest.raises(RuntimeError, match="not resizable"):
        a.resize_(4, 3, 8, 8)
