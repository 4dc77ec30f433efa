"""lowerings.package_kernels: which kernels hold package nodes, and their tiling and size types."""

from __future__ import annotations

import types

import sympy
import torch
from torch._inductor.virtualized import V

import decomps
import lowerings
from lowerings import package_kernels

aten = torch.ops.aten
s0 = sympy.Symbol("s0", integer=True, positive=True)


def _origin(op, target=None):
    return types.SimpleNamespace(meta={"original_aten": op}, target=target or op)


def _buffer(*ops, stride=(16, 1), target=None, size=(4, 16)):
    origins = [_origin(op, target) for op in ops]
    return types.SimpleNamespace(origins=origins, get_stride=lambda: list(stride), get_size=lambda: list(size))


def _schedule(*buffers):
    # Reduction markers in a real schedule have no ``node``.
    return [types.SimpleNamespace(node=b) for b in buffers] + [object()]


UPSAMPLE = aten.upsample_nearest2d.default
CHANNELS_LAST = (256 * 64, 1, 256 * 8, 256)


def test_package_buffers_by_op_name():
    up, add = _buffer(UPSAMPLE), _buffer(aten.add.Tensor)
    assert package_kernels.package_buffers(_schedule(up, add)) == [up]
    assert package_kernels.package_buffers(_schedule(add)) == []
    backward = _buffer(aten._upsample_nearest_exact3d_backward.default)
    assert package_kernels.package_buffers(_schedule(backward)) == [backward]


def test_fuses_other_ops():
    assert package_kernels.fuses_other_ops(_schedule(_buffer(UPSAMPLE, aten.add.Tensor)))
    assert not package_kernels.fuses_other_ops(_schedule(_buffer(UPSAMPLE, UPSAMPLE)))


def test_tiling_settings():
    settings = package_kernels.tiling_settings
    alone = _schedule(_buffer(UPSAMPLE))
    fused = _schedule(_buffer(UPSAMPLE, aten.cat.default))
    cl = _schedule(_buffer(UPSAMPLE, stride=CHANNELS_LAST))
    assert settings(fused, 4096, 1) == {"triton.max_tiles": 1}  # fused: flat
    assert settings(fused, 64 * s0, 1) == {"triton.max_tiles": 1}
    assert settings(alone, 4096, 1) == {}  # alone: Inductor's choice
    assert settings(alone, 64 * s0, 1) == {}
    assert settings(cl, 64 * s0, 1) == {"triton.prefer_nd_tiling": True}  # dynamic channels-last
    assert settings(cl, 4096, 1) == {}
    assert settings(fused, 4096, 16) == {}  # reductions keep Inductor's choice
    assert settings(_schedule(_buffer(aten.add.Tensor)), 4096, 1) == {}  # not ours
    # a repeat op's generated code (lowerings.repeat): flat, alone too
    repeat = _schedule(_buffer(UPSAMPLE, target=torch.ops.decomps.upsample_repeat.default))
    assert settings(repeat, 4096, 1) == {"triton.max_tiles": 1}
    assert settings(repeat, 64 * s0, 1) == {"triton.max_tiles": 1}


def test_tiling_settings_of_contiguous_rows():
    """A contiguous 4-d kernel alone, with dynamic sizes, tiles in nd where its rows have a
    runtime length or a static one of at least ``ND_MIN_STATIC_ROW``."""
    settings = package_kernels.tiling_settings

    def alone(*size):
        return _schedule(_buffer(UPSAMPLE, size=size, stride=(0, 0, size[-1], 1)))

    nd = {"triton.prefer_nd_tiling": True}
    assert settings(alone(8, 64, s0, s0), 512 * s0**2, 1) == nd
    # a literal output size, the input's sizes symbolic
    assert settings(alone(s0, 3, 2345, 2456), 5759320 * 3 * s0, 1) == nd
    assert settings(alone(8, s0, 300, 300), 720000 * s0, 1) == {}  # short rows: flat
    assert package_kernels.ND_MIN_STATIC_ROW == 1024
    assert settings(alone(8, 64, 300, 300), 46080000, 1) == {}  # static: Inductor's choice
    # other ranks keep Inductor's choice; fused kernels stay flat
    volume = _schedule(_buffer(UPSAMPLE, size=(2, 32, s0, s0, s0), stride=(32 * s0**3, s0**3, s0**2, s0, 1)))
    assert settings(volume, 64 * s0**3, 1) == {}
    fused = _schedule(_buffer(UPSAMPLE, aten.add.Tensor, size=(8, 64, s0, s0), stride=(64 * s0**2, s0**2, s0, 1)))
    assert settings(fused, 512 * s0**2, 1) == {"triton.max_tiles": 1}


def test_tiling_settings_of_channel_rows():
    """A channels-last 4-d forward alone, with dynamic sizes, tiles in 3d where its pixels hold
    at least ``ND3_MIN_CHANNELS`` channels; with fewer, fused, in the backward or in 3d, in nd."""
    settings = package_kernels.tiling_settings

    def cl(c, *ops, rank=2):
        size = (8, c) + (s0,) * rank
        stride = (c * s0**rank, 1) + tuple(c * s0 ** (rank - 1 - d) for d in range(rank))
        return _schedule(_buffer(*(ops or (UPSAMPLE,)), size=size, stride=stride))

    nd3 = {"triton.prefer_nd_tiling": True, "triton.max_tiles": 3}
    nd = {"triton.prefer_nd_tiling": True}
    assert package_kernels.ND3_MIN_CHANNELS == 8
    assert settings(cl(64), 512 * s0**2, 1) == nd3
    assert settings(cl(8), 64 * s0**2, 1) == nd3
    assert settings(cl(3), 24 * s0**2, 1) == nd
    assert settings(cl(64, UPSAMPLE, aten.add.Tensor), 512 * s0**2, 1) == nd
    assert settings(cl(64, aten.upsample_nearest2d_backward.default), 512 * s0**2, 1) == nd
    assert settings(cl(64, aten.upsample_nearest3d.default, rank=3), 512 * s0**3, 1) == nd
    assert settings(cl(64), 512 * 300 * 300, 1) == {}  # static: Inductor's choice


def _kernel(index_dtype, *buffers):
    return types.SimpleNamespace(
        index_dtype=index_dtype, features=types.SimpleNamespace(node_schedule=_schedule(*buffers))
    )


def test_size_arguments_narrowed_only_for_32_bit_package_kernels():
    graph = types.SimpleNamespace(cpp_wrapper=False)
    with V.set_graph_handler(graph):
        assert package_kernels.narrows_size_arguments(_kernel("tl.int32", _buffer(UPSAMPLE)))
        assert not package_kernels.narrows_size_arguments(_kernel("tl.int64", _buffer(UPSAMPLE)))
        assert not package_kernels.narrows_size_arguments(_kernel("tl.int32", _buffer(aten.add.Tensor)))
    with V.set_graph_handler(types.SimpleNamespace(cpp_wrapper=True)):
        assert not package_kernels.narrows_size_arguments(_kernel("tl.int32", _buffer(UPSAMPLE)))


def test_signature_types(monkeypatch):
    stock = {"in_ptr0": "*bf16", "ks0": "i64", "ks1": "i64", "xnumel": "i32", "XBLOCK": "constexpr"}
    monkeypatch.setitem(package_kernels._stock, "signature_to_meta", lambda *a, **k: dict(stock))
    with V.set_graph_handler(types.SimpleNamespace(cpp_wrapper=False)):
        with V.set_kernel_handler(_kernel("tl.int32", _buffer(UPSAMPLE))):
            narrowed = package_kernels.signature_to_meta([], size_dtype="tl.int32", argdefs=[])
            assert narrowed == {**stock, "ks0": "i32", "ks1": "i32"}
            template = package_kernels.signature_to_meta([], size_dtype="tl.int32", argdefs=[], is_template=True)
            assert template == stock
        with V.set_kernel_handler(_kernel("tl.int32", _buffer(aten.add.Tensor))):
            assert package_kernels.signature_to_meta([], size_dtype="tl.int32", argdefs=[]) == stock


def test_kernels_with_size_arguments_name_them_and_skip_the_autotune_cache(monkeypatch):
    from lowerings.size_variants import SIZE_ARGS

    stock = {"kernel_name": "k", "autotune_local_cache": True}
    monkeypatch.setitem(package_kernels._stock, "inductor_meta_common", lambda cls: dict(stock))
    with V.set_kernel_handler(types.SimpleNamespace(_decomps_size_args=["ks0", "xnumel"])):
        meta = package_kernels.inductor_meta_common.__func__(object)
    assert meta == {"kernel_name": "k", "autotune_local_cache": False, SIZE_ARGS: ["ks0", "xnumel"]}
    with V.set_kernel_handler(types.SimpleNamespace()):
        assert package_kernels.inductor_meta_common.__func__(object) == stock


def test_kernels_compiled_for_cuda_graphs_say_so(monkeypatch):
    from torch._inductor import config

    from lowerings.size_variants import CUDA_GRAPHS

    monkeypatch.setitem(package_kernels._stock, "inductor_meta_common", lambda cls: {"kernel_name": "k"})
    with config.patch({"triton.cudagraphs": True}):  # mode="reduce-overhead"
        with V.set_kernel_handler(types.SimpleNamespace(_decomps_size_args=["ks0"])):
            assert package_kernels.inductor_meta_common.__func__(object)[CUDA_GRAPHS] is True
        with V.set_kernel_handler(types.SimpleNamespace()):  # no size arguments: no variants
            assert CUDA_GRAPHS not in package_kernels.inductor_meta_common.__func__(object)
    with V.set_kernel_handler(types.SimpleNamespace(_decomps_size_args=["ks0"])):
        assert CUDA_GRAPHS not in package_kernels.inductor_meta_common.__func__(object)


def test_installed_with_the_package():
    from torch._inductor.codegen import simd, triton

    assert lowerings.missing_codegen_hooks() == []
    assert triton.signature_to_meta is package_kernels.signature_to_meta
    assert simd.SIMDScheduling.__dict__["get_tiling_and_scores"] is package_kernels.get_tiling_and_scores
    with decomps.disabled():
        assert triton.signature_to_meta is not package_kernels.signature_to_meta
        assert simd.SIMDScheduling.__dict__["get_tiling_and_scores"] is not package_kernels.get_tiling_and_scores
