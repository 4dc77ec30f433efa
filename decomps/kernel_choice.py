"""Which kernel a call site runs: the decomposition's generated code, ATen's own kernel as an
extern call (``aten_kernels``), or the integer-repeat ops (``repeat_kernels``), which Inductor
lowers to the package's Triton kernels or to generated code (``lowerings.repeat``); where a
generated gather loads its index from a table (``index_tables``), where it indexes a repeated
dim by its map rather than ``o // k`` (``repeat_map``), and where a downsample's backward stores
each gradient element into its input rather than gathering windows (``plain_store``).

Inductor's C++ backend loads a gather along the innermost dim element by element through a buffer
of one vector; eager's contiguous kernel, a loop over precomputed offsets, is faster there for
most dtypes (docs/findings.md, finding 3), but not for float32 where the vectors are AVX2's or
wider nor bfloat16 where they are AVX2's (the index loaded from a table, as whole vectors), and eager's
backward beats the generated window gather wherever an outer dim gathers. On CUDA the generated
window gather divides by runtime sizes where they are symbolic, and eager's contiguous backward
kernel is the faster one there (finding 2), unless the kernels launch size variants
(``sizes_at_launch``), whose sizes are constants. Every index-free path (views, strided slices,
short periods), contiguous uint8 (eager's uint8 forward kernel is the slower one), every
channels-last forward and other devices keep the generated code. Channels-last gathers of few
channels read rows of (W * C) elements, or gather per pixel where the dtype's row loads do not win
at the backend's vector width (``lowerings.cpu_vectors``). docs/design.md, "Kernel choice", has
the table and the measurements.

The choice reads only the decisions the decomposition has already taken (its patterns, after
short periods), with one guard of its own: the channel count of a channels-last gather of few
channels (``_few_channels``), taken only where the example sizes have it. While exporting the
decomposition stays, so exported programs hold aten ops only.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch._prims_common import suggest_memory_format

from lowerings import cpu_gathers, cpu_vectors, size_variants

from . import index_patterns, size_conditions
from .eager_rules import KernelChoice, Rule

# Device types whose contiguous forward gathers and backward window gathers may run ATen's kernel.
ATEN_KERNEL_DEVICES = ("cpu",)
# Device types whose backward gathers windows over symbolic sizes with ATen's kernel, and the
# layouts where that kernel is the faster one.
ATEN_SYMBOLIC_BACKWARD_DEVICES = ("cuda",)
ATEN_SYMBOLIC_BACKWARD_LAYOUTS = (torch.contiguous_format,)
# Device types whose contiguous integer repeats become the repeat ops.
REPEAT_KERNEL_DEVICES = ("cuda", "cpu")
# Device types whose generated gathers may load their index from a table.
INDEX_TABLE_DEVICES = ("cpu",)
# Device types whose channels-last gathers of few channels may read whole rows of (W * C)
# elements instead of moving each pixel as one masked vector, and the most channels where that
# wins. Not CUDA, whose lanes are elements: rows took 24.1-26.1 us there against 16.4-17.3
# (docs/design.md, "Channels-last gathers of few channels").
FEW_CHANNELS_DEVICES = ("cpu",)
FEW_CHANNELS = 3
# Device types whose channels-last 2d gathers of few channels over static sizes, in 1- and
# 2-byte dtypes, run the package's kernel over rows (``channel_rows``): on an H200, harness,
# kernels, (4,3,2345,2456)->(1234,1345) 29.2-29.5 us against the generated gather's 32.6-32.9,
# the upsample (4,3,1234,1345)->(2345,2456) 48.7-49.4 against 64.7-68.4 (docs/design.md,
# "Channels-last gathers of few channels").
CHANNEL_ROWS_KERNEL_DEVICES = ("cuda",)
# The C++ backend's vector width (bits) from which a gather along the innermost dim loads its
# index from a table; with narrower vectors (AVX2) the table loses on most uint8 rows
# (docs/design.md, "Kernel choice"), but for the dtypes below.
WIDE_VECTOR_BITS = 512
# Per dtype, the backend's vector widths (bits) at which its gathers run table-driven generated
# code rather than ATen's kernel or a map computed per lane: contiguous gathers along the
# innermost dim load their index from a table (whole vectors, ``lowerings.cpu_gathers``),
# channels-last ones of few channels read rows. AMD EPYC with AVX2, 1 thread, interleaved, time
# / eager's, table / ATen's extern / computed: float32 0.76-1.23x / 1.20-1.91x / 1.10-2.64x,
# channels-last rows 0.25-0.49x against per pixel 0.75-1.68x; uint8 0.47-0.74x / 1.13-1.51x / 0.63-1.10x;
# bfloat16 0.71-1.37x / 1.13-1.65x / 1.62-2.66x. With AVX512's vectors bfloat16 keeps ATen's
# kernel (186 / 169 us) (docs/design.md, "Kernel choice").
TABLE_GATHER_WIDTHS = {torch.float32: (256, 512), torch.uint8: (256, 512), torch.bfloat16: (256,)}
# Device types whose contiguous gathers along the innermost dim index their repeated dims by
# eager's map instead of ``o // k``.
REPEAT_MAP_DEVICES = ("cpu",)
# Where the backward stores each gradient element into the one input it belongs to, if no input
# receives two (downsampling; ``backward._store_to_owners``): per device type, the layouts (None:
# any), and whether static sizes store too. On CPU channels_last_3d rows keep ATen's kernel; on
# CUDA the generated gather over static sizes is the faster one (docs/design.md, "Kernel choice").
PLAIN_STORE_LAYOUTS = {"cpu": (torch.contiguous_format, torch.channels_last), "cuda": None}
PLAIN_STORE_STATIC_DEVICES = ("cpu",)
# Device types whose plain stores read their input indices from a table.
OWNER_TABLE_DEVICES = ("cpu", "cuda")
# Device types whose window gathers over several dims read the window positions from one table.
WINDOW_TABLE_DEVICES = ("cuda",)
# Device types whose window gathers of one tap (downsampling) over at most
# ``POSITIONS_IN_GATHER_MAX_DIMS`` dims compute their window starts in the gather
# (``index_tables.gather_window_starts``), with no table.
POSITIONS_IN_GATHER_DEVICES = ("cuda",)
POSITIONS_IN_GATHER_MAX_DIMS = 1
# Device types whose package kernels launch with each call's sizes as constants
# (``lowerings.size_variants``) where Inductor indexes them in 32 bits.
SIZE_VARIANT_DEVICES = ("cuda",)
INT32_MAX = 2**31 - 1
# Above this many taps per grad_input element, the backward sums in a reduction kernel
# (backward.MAX_UNROLLED_TAPS): the repeat op's generated code unrolls them.
MAX_REPEAT_TAPS = 16


def _eligible(tensor: Tensor, devices, layouts=(torch.contiguous_format,)) -> bool:
    """A custom op is an option: one of its devices, one of its layouts (None: any), not
    exporting."""
    return (
        tensor.device.type in devices
        and (layouts is None or suggest_memory_format(tensor) in layouts)
        and not torch.compiler.is_exporting()
    )


def aten_forward(input: Tensor, patterns) -> bool:
    """Whether the forward runs ATen's kernel, where the decomposition would gather its innermost
    dim (``patterns[-1]`` None: no index-free pattern, no short period): a contiguous
    floating-point input but for ``_table_gathers`` (float32 with AVX2's vectors or wider,
    bfloat16 with AVX2's).
    Channels-last inputs never do: ATen's channels-last kernel computes both source indices per
    pixel and copies its C elements one by one (uint8, 3 channels: 1.08-1.30x eager's time as an
    extern call, rows 0.36-0.68x; docs/design.md, "Kernel choice").

    ``patterns``: per spatial dim, the index-free pattern the decomposition uses, None where it
    gathers.
    """
    if patterns[-1] is not None or not _eligible(input, ATEN_KERNEL_DEVICES):
        return False
    return input.dtype.is_floating_point and not _table_gathers(input.dtype)


def period_slices(input: Tensor, patterns) -> bool:
    """Whether the forward cuts the innermost dim's short period into slices
    (``forward._slice_periods``) rather than gathering it, where every outer dim is a view
    (``patterns[:-1]``): unless an outer dim repeats and the dtype's gathers load whole vectors
    (``cpu_gathers.vector_dtypes()``).

    Where no outer dim repeats, the slices' cat is the output, written once; the slices win or
    tie. Where one repeats, the cat is a buffer that the repeat copies again, while a vector
    gather writes each output once. float32, AVX512, symbolic size, us, slices / gather (eager):
    (4,3,300,400)->(600,700) 2 threads 810-830 / 585 (856), 1 thread 1375-1442 / 868-1006
    (1830); (1,3,300,400)->(600,700) 2 threads 163 / 122 (218); no repeat: (4,64,4000) x1.5
    1 thread 352 / 476 (532), 2 threads 167 / 215 (231). AVX2, 1 thread, the median over rounds
    of slices' time / the gather's: (1,3,300,400)->(600,700) 2.28 (nearest), 1.80
    (nearest-exact), (4,3,300,400) 2.66 and 2.51; no repeat: (4,64,4000) x1.5 1.24,
    (1,3,300,400)->(300,700) 0.87 (docs/design.md, "Kernel choice").
    """
    if any(p.kind == "repeat" for p in patterns[:-1]):
        return input.dtype not in cpu_gathers.vector_dtypes()
    return True


def sizes_at_launch(tensor: Tensor, *numels) -> bool:
    """Whether the package's kernels over ``tensor`` and buffers of ``numels`` elements see
    symbolic sizes as constants: on a device of ``SIZE_VARIANT_DEVICES`` whose kernels will
    launch size variants (``lowerings.size_variants.compiling_variants``), indexed in 32 bits (the
    bound Inductor guards too, taken where the example sizes have it). There the choices made for
    static sizes hold for symbolic ones: their kernels run as the static ones for the sizes a
    call site launches most (docs/design.md, "Kernel choice"); a size past a kernel's
    ``MAX_VARIANTS`` runs the kernel with runtime sizes."""
    if not _eligible(tensor, SIZE_VARIANT_DEVICES, layouts=None) or not size_variants.compiling_variants():
        return False
    return all(size_conditions.holds_where_taken(n <= INT32_MAX) for n in (tensor.numel(), *numels))


def aten_backward(grad_output: Tensor, patterns, constant) -> bool:
    """Whether the backward runs ATen's kernel: on CPU where some outer dim (any but the
    innermost) of a contiguous ``grad_output`` would gather windows, or any dim of a 4-d
    channels-last one (its fwd+bwd step 1.7-6.3x faster than with the generated gather, AVX2),
    or any dim of a channels_last_3d one would gather or sum a repeat's windows (the
    (2,32,64,64,64) f32 fwd+bwd steps, x2 / x1.5, AVX512, 1 thread: 1022 / 424 ms generated,
    449 / 280 with ATen's backward, eager 440 / 283); on CUDA where some dim would gather
    windows over runtime sizes (the generated gather divides by them and masks its window
    positions; with constant sizes it beats eager's kernel).

    ``patterns``: per spatial dim, after the innermost dim's short period; ``constant``: per
    spatial dim, whether the kernels see its input and output sizes as constants (static, or
    ``sizes_at_launch``).
    """
    if _eligible(grad_output, ATEN_KERNEL_DEVICES) and any(p is None for p in patterns[:-1]):
        return True
    if _eligible(grad_output, ATEN_KERNEL_DEVICES, (torch.channels_last,)) and any(p is None for p in patterns):
        return True
    if _eligible(grad_output, ATEN_KERNEL_DEVICES, (torch.channels_last_3d,)) and any(
        p is None or p.kind == "repeat" for p in patterns
    ):
        return True
    symbolic_gather = any(p is None and not c for p, c in zip(patterns, constant))
    layouts = ATEN_SYMBOLIC_BACKWARD_LAYOUTS
    return symbolic_gather and _eligible(grad_output, ATEN_SYMBOLIC_BACKWARD_DEVICES, layouts)


def plain_store(grad_output: Tensor, patterns, constant) -> bool:
    """Whether the backward may store each gradient element into its input
    (``backward._store_to_owners``) where every dim's windows hold at most one output: some dim
    gathers (``patterns``: None there; index-free downsampling stays a view), on a device and
    layout of ``PLAIN_STORE_LAYOUTS``, and with runtime sizes in a gathered dim (``constant``: per
    spatial dim, as in ``aten_backward``) unless the device is one of
    ``PLAIN_STORE_STATIC_DEVICES``.

    The store reads each gradient element once and writes zeros elsewhere; the gather reads a
    window per grad_input element (four times as many elements for a 2x downsample), and with
    runtime sizes divides by them (docs/findings.md, finding 2). On CPU channels-last 2d rows
    store too: with the gradient in a block (``decomps.block_pool``) their steps took 0.54-1.19x
    the time of ATen's backward as an extern call, at or under it in 10 of 12 readings (AMD EPYC
    Zen 5, 2 and 1 threads, (1,3,1200,1300)->(200,300) and (1,3,500,400)->(256,256), medians of
    interleaved rounds, ``perf.probes.cpu_step_forms_probe --channels-last``, three processes).
    """
    gathered = [c for p, c in zip(patterns, constant) if p is None]
    device = grad_output.device.type
    if not gathered or device not in PLAIN_STORE_LAYOUTS:
        return False
    if not _eligible(grad_output, (device,), PLAIN_STORE_LAYOUTS[device]):
        return False
    return device in PLAIN_STORE_STATIC_DEVICES or not all(gathered)


def owner_table(grad_output: Tensor) -> bool:
    """Whether the plain store's input indices are a table (``index_tables``), computed once per
    call, rather than computed at each stored element."""
    return grad_output.device.type in OWNER_TABLE_DEVICES


def window_table(grad_output: Tensor, moving_dims: int) -> bool:
    """Whether a backward window gather over ``moving_dims`` dims reads their window positions
    from one table (``index_tables``), built by one kernel: on CUDA, for two or more dims, not
    while exporting. Inductor realizes each such dim's positions and masks otherwise, four small
    kernels before a 2d gather, and the gather ran slower (docs/findings.md, finding 2); one
    dim's it computes in the gather (x1.5 f16's outer dim), where a table would add a launch
    (``backward._gather_windows``: the index and the mask apart)."""
    return moving_dims > 1 and _eligible(grad_output, WINDOW_TABLE_DEVICES, layouts=None)


def positions_in_gather(grad_output: Tensor, taps: int, dims: int) -> bool:
    """Whether a backward window gather of ``taps`` taps over ``dims`` dims computes its window
    starts in the gather (``index_tables.gather_window_starts``) rather than reading a window
    table: one tap (every window holds at most one output) over at most
    ``POSITIONS_IN_GATHER_MAX_DIMS`` dims, on a device of ``POSITIONS_IN_GATHER_DEVICES``, not
    while exporting. The table costs a kernel and an allocation per call, which host-bound
    training steps pay in full (docs/findings.md, finding 8); the starts are computed at both
    ends of each dim's window at every grad_input element. Over two dims the table's gather is
    the faster one (H200, (4,3,2345,2456)->(1234,1345) steps, backward kernel, starts / table,
    us): with symbolic sizes nearest's 100.1 / 104.6 (bf16), 100.8 / 86.5 (f32), 115.8 / 93.9
    (bf16 channels-last), nearest-exact's 107.1-242.9 / 86.9-104.5; with static sizes the steps'
    kernels took up to twice the table's time."""
    return (
        taps == 1
        and dims <= POSITIONS_IN_GATHER_MAX_DIMS
        and _eligible(grad_output, POSITIONS_IN_GATHER_DEVICES, layouts=None)
    )


def repeat_op(tensor: Tensor, patterns) -> bool:
    """Whether an integer repeat runs as a repeat op: every spatial dim repeats or stays
    (``patterns``: ``repeat`` or ``identity``, no slices, no gathers), some dim repeats, and the
    backward's window has at most ``MAX_REPEAT_TAPS`` elements. A channels-last 4-d tensor is
    a contiguous (N, H, W, C) one whose channels stay (``repeats.channels_last_rows``)."""
    if not all(p is not None and p.kind in ("repeat", "identity") for p in patterns):
        return False
    factors = index_patterns.repeat_factors(patterns)
    taps = 1
    for k in factors:
        taps *= k
    layouts = (torch.contiguous_format, torch.channels_last) if tensor.dim() == 4 else (torch.contiguous_format,)
    return _eligible(tensor, REPEAT_KERNEL_DEVICES, layouts) and 1 < taps <= MAX_REPEAT_TAPS


def index_table(input: Tensor, innermost: bool, rule: Rule | KernelChoice) -> bool:
    """Whether a gathered dim loads its index from a table computed once per call
    (``index_tables``) instead of computing it wherever it is read: on CPU, where the dim is the
    output's innermost in memory (its map is computed per element) and the C++ backend's
    vectors are ``WIDE_VECTOR_BITS`` wide or the dtype's gathers ``_table_gathers`` (with
    AVX2's vectors float32, uint8 and bfloat16, whose tables win since the index loads whole
    vectors, ``lowerings.cpu_gathers``; float64 and float16 keep ATen's kernel),
    or where the dim is an outer one whose map is float64 arithmetic (the generic kernel's
    nearest-exact centre shift, float64 input, or both CPU kernels' maps selected at run time);
    not while exporting.

    Elsewhere the map is computed once per row or pixel in float32, as cheap as loading it: a
    channels-last (1,3,300,400)->(600,700) nearest with a literal size took 753 us computing it
    and 1071 us loading it (docs/design.md, "Index tables").

    ``innermost``: the dim is the last spatial dim of a contiguous output; ``rule``: the dim's
    rule (``KernelChoice.along``), a ``KernelChoice`` only where the two kernels' maps differ.
    """
    if not _eligible(input, INDEX_TABLE_DEVICES, layouts=None):
        return False
    if innermost:
        return _wide_vectors() or _table_gathers(input.dtype)
    return isinstance(rule, KernelChoice) or rule.centre_shift or rule.double


def repeat_map(input: Tensor, patterns) -> bool:
    """Whether the forward indexes its repeated dims (``Pattern("repeat")``) by eager's map, as
    it does a gathered dim, instead of ``o // k``: on CPU, for a contiguous input whose innermost
    dim gathers. Inductor folds ``o // k`` into the gather's load index, and the C++ backend
    computes that index for each vector lane (an int64 floor division per element); the map is
    computed once per row: uint8 (1,3,300,400)->(600,700) with a literal size (H x2) went from
    0.61x Nightly to 0.97x with AVX2's code, and is 1.49x with AVX512's (docs/design.md, "Kernel
    choice"). Channels-last gathers move whole pixels or rows and keep ``o // k`` (there the map
    lost for bf16 rows with AVX2)."""
    if patterns[-1] is not None or not any(p is not None and p.kind == "repeat" for p in patterns):
        return False
    return _eligible(input, REPEAT_MAP_DEVICES)


def _table_gathers(dtype: torch.dtype) -> bool:
    """Whether gathers of ``dtype`` run table-driven generated code rather than ATen's kernel at
    the C++ backend's vector width (``TABLE_GATHER_WIDTHS``)."""
    return cpu_vectors.vector_bits() in TABLE_GATHER_WIDTHS.get(dtype, ())


def _wide_vectors() -> bool:
    """Whether the C++ backend's vectors are AVX512's width or wider."""
    return cpu_vectors.vector_bits() >= WIDE_VECTOR_BITS


def channel_rows(input: Tensor, patterns) -> bool:
    """Whether a channels-last gather of few channels (``_few_channels``) reads each output row
    as one row of (W * C) elements through a table of source offsets
    (``forward._gather_channel_rows``): 1- and 2-byte dtypes (uint8, bfloat16, float16) and
    ``_table_gathers`` (float32 with AVX2's vectors or wider); float64, and float32 with
    narrower vectors, gather per pixel.

    The backend moves each pixel of a per-pixel gather as one masked vector, mostly empty for a
    few channels; a row's table-driven loads fill whole vectors. uint8 with AVX2's vectors, 3
    channels, 1 thread, interleaved: rows 0.36-0.68x eager's time, per pixel 2.06-3.23x.
    """
    if input.device.type not in FEW_CHANNELS_DEVICES:  # before asking the CPU's vector width
        return False
    if input.dtype.itemsize <= 2 or _table_gathers(input.dtype):
        return _few_channels(input, patterns)
    return False


def channel_rows_kernel(input: Tensor, output_size, patterns) -> bool:
    """Whether a channels-last 2d gather of few channels (``_few_channels``) runs the op
    ``decomps::gather_channel_rows``: on ``CHANNEL_ROWS_KERNEL_DEVICES``, 1- and 2-byte dtypes,
    static sizes (the op's map is checked against eager's on the host,
    ``channel_rows.kernel_scales``)."""
    if input.dim() != 4 or input.dtype.itemsize > 2 or not size_conditions.is_static(*input.shape, *output_size):
        return False
    return _few_channels(input, patterns, CHANNEL_ROWS_KERNEL_DEVICES)


def _few_channels(input: Tensor, patterns, devices=FEW_CHANNELS_DEVICES) -> bool:
    """A channels-last gather on CPU whose innermost spatial dim gathers (``patterns[-1]`` None),
    no dim a strided slice (its rows stay a view), with at most ``FEW_CHANNELS``
    channels: a guard where the example sizes have it (``holds_where_taken``; other sizes keep
    the per-pixel gather, exact for every size)."""
    layouts = (torch.channels_last, torch.channels_last_3d)
    if not _eligible(input, devices, layouts) or patterns[-1] is not None:
        return False
    if any(p is not None and p.kind == "stride" for p in patterns):
        return False
    return size_conditions.holds_where_taken(input.shape[1] <= FEW_CHANNELS)
