"""Lowering of ``decomps::gather_channel_rows``: the package's Triton kernel
(``decomps.triton_channel_rows``) as a user-defined Triton kernel of the generated code where its
input is a channels-last buffer and nothing would fuse with its result, else a pointwise node of
the same map, which fuses with its producer and users."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .repeat import _fits_32bit, _strided_view, runs_op_kernel


def _kernel_applies(x, out_size) -> bool:
    """A channels-last 4-d input read in place, static sizes (the launch configuration reads
    them), 32-bit indexing, this torch's user-kernel lowering."""
    import sympy

    from torch._higher_order_ops.triton_kernel_wrap import triton_kernel_wrapper_mutation
    from torch._inductor import ir
    from torch._inductor.lowering import lowerings
    from torch._inductor.virtualized import V

    if triton_kernel_wrapper_mutation not in lowerings or x.get_device().type != "cuda":
        return False
    if not ir.is_storage_and_layout(x):
        return False
    size = list(x.get_size())
    if not all(isinstance(s, (int, sympy.Integer)) for s in [*size, *out_size]):
        return False
    stride = list(x.get_layout().stride)
    if not V.graph.sizevars.statically_known_list_equals(stride, list(ir.make_channels_last_strides_for(size))):
        return False
    return _fits_32bit(size[0] * size[1] * size[2] * size[3]) and _fits_32bit(
        out_size[0] * out_size[1] * out_size[2] * out_size[3]
    )


def _triton_call(x, out_size, scales, exact):
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table, triton_kernel_wrapper_mutation
    from torch._inductor import ir
    from torch._inductor.lowering import empty_strided, lowerings
    from torch.utils._sympy.functions import CeilDiv

    from decomps import triton_channel_rows

    n, c, h_in, w_in = x.get_size()
    h_out, w_out = out_size[2:]
    out = empty_strided(out_size, ir.make_channels_last_strides_for(out_size), dtype=x.get_dtype(),
                        device=x.get_device())
    rows, row_out = n * h_out, w_out * c
    config = triton_channel_rows.launch_config(int(c), exact, (int(h_in), int(w_in)), (int(h_out), int(w_out)),
                                                x.get_dtype().itemsize)
    # The scales as constant arguments, which Inductor passes as float64 (the kernel multiplies
    # in float32).
    constants = {**config, "scale_h": scales[0], "scale_w": scales[1]}
    lowerings[triton_kernel_wrapper_mutation](
        kernel_idx=kernel_side_table.add_kernel(triton_channel_rows.channel_rows),
        constant_args_idx=kernel_side_table.add_constant_args(constants),
        grid=[(triton_channel_rows.programs(rows, row_out, config, CeilDiv), 1, 1)],
        tma_descriptor_metadata={},
        kwargs={"in_ptr": x, "out_ptr": out, "rows": rows, "h_out": h_out, "h_in": h_in, "w_in": w_in,
                "row_out": row_out},
    )
    return out


def _pointwise(x, out_size, scales, exact):
    """``out[n, c, oh, ow] = x[n, c, src(oh), src(ow)]``, ``src`` as the kernel computes it."""
    from torch._inductor import ir
    from torch._inductor.virtualized import ops

    load = x.make_loader()
    isizes = list(x.get_size())[2:]

    def source(o, isize, scale):
        v = ops.to_dtype(ops.index_expr(o, torch.int32), torch.float32)
        if exact:
            v = ops.add(v, ops.constant(0.5, torch.float32))
        v = ops.to_dtype(ops.mul(v, ops.constant(scale, torch.float32)), torch.int32)
        v = ops.minimum(v, ops.constant(isize - 1, torch.int32))
        return ops.indirect_indexing(v, isize, check=False)

    def inner_fn(index):
        n, c, oh, ow = index
        return load([n, c, source(oh, isizes[0], scales[0]), source(ow, isizes[1], scales[1])])

    return ir.Pointwise.create(device=x.get_device(), dtype=x.get_dtype(), inner_fn=inner_fn, ranges=list(out_size))


def gather_channel_rows(x, output_size: Sequence, scales: Sequence[float], exact: bool):
    out_size = [*list(x.get_size())[:2], *output_size]
    source = _strided_view(x)
    if runs_op_kernel(source) and _kernel_applies(source, out_size):
        return _triton_call(source, out_size, scales, exact)
    return _pointwise(x, out_size, scales, exact)


def lowerings() -> dict:
    """``{op: lowering}`` to put into Inductor's lowering table."""
    return {torch.ops.decomps.gather_channel_rows.default: gather_channel_rows}
