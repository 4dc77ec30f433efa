"""The benchmark case matrix: a pure function of the run options.

This module does not import torch: dtypes and memory formats are the names of
the ``torch`` attributes (``"float32"``, ``"channels_last"``), so the matrix
can be built, listed and tested without paying for a torch import.

Case kinds:

* ``interp``: ``F.interpolate`` alone (1d, 2d, 3d), forward or forward+backward.
* ``fpn_merge``: ``lateral + F.interpolate(top, scale_factor=2)``, forward or forward+backward.
* ``unet_skip``: ``torch.cat([skip, F.interpolate(x, scale_factor=2)], 1)``, forward or forward+backward.
* ``fpn_neck``: one training step (forward + backward) of a 4-level FPN neck.

Call forms of the ``interp`` rows called with ``size`` (the seed's rows), as ``torch.compile(...,
dynamic=True)`` traces them:

* ``symbolic``: the size is a variable of the compiled function's closure, as in the seed's
  script; Dynamo traces closure ints as symbols, so the output size is symbolic like the input's.
* ``literal``: the size is written as constants (``F.interpolate(x, size=(600, 700))``), so the
  output size is static while the input's is symbolic. Its sub_label ends with ``, size: literal``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from itertools import product

MODES = ("nearest", "nearest-exact")
DEVICES = ("cpu", "cuda")
KINDS = ("interp", "fpn_merge", "unet_skip", "fpn_neck")
CALL_FORMS = ("symbolic", "literal")
ELEMENT_SIZE = {"uint8": 1, "float16": 2, "bfloat16": 2, "float32": 4}
FLOAT_DTYPES = ("float16", "bfloat16", "float32")
FUSED_KINDS = ("fpn_merge", "unet_skip")
TRAINING_STEP = "fwd+bwd"  # in the label of every row that times forward + backward

CONTIGUOUS = "contiguous_format"
CHANNELS_LAST = {1: CONTIGUOUS, 2: "channels_last", 3: "channels_last_3d"}

# The seed PR's (input size, output size) pairs.
SEED_PAIRS = {
    "cpu": (((500, 400), (256, 256)), ((1200, 1300), (200, 300)), ((300, 400), (600, 700))),
    "cuda": (((2345, 2456), (1234, 1345)), ((1234, 1345), (2345, 2456))),
}
SEED_DTYPES = {"cpu": ("uint8", "float32"), "cuda": ("float32", "float16", "bfloat16")}
# Extra rows: float32 everywhere, plus bfloat16 on CUDA.
EXTRA_DTYPES = {"cpu": ("float32",), "cuda": ("float32", "bfloat16")}
# UNet-style decoder tensor; CPU uses batch 1 so that x4 (256 MB out) stays feasible.
UNET_SHAPE = {"cpu": (1, 256, 128, 128), "cuda": (8, 256, 128, 128)}
SHAPE_1D = (16, 64, 16000)
SHAPE_3D = (2, 32, 64, 64, 64)
SHAPE_X15_F16 = (8, 64, 200, 200)
# Fused consumers: the low-resolution input; CUDA outputs are >= 64 MB in bf16.
FUSED_TOP_SHAPE = {"cpu": (1, 64, 64, 64), "cuda": (8, 256, 128, 128)}
# FPN neck: the finest level (N, C0, H0, W0); level i has C0 * 2**i channels, H0 / 2**i rows.
NECK_SHAPE = {"cpu": (1, 64, 32, 32), "cuda": (8, 64, 200, 200)}
NECK_LEVELS = 4
NECK_OUT_CHANNELS = 128


@dataclass(frozen=True)
class Case:
    """One benchmark row: what to build and how to label it.

    ``shape`` is the interpolated input's shape (for ``fpn_neck``: the finest
    level's). ``osize`` is the interpolated output's spatial size. When
    ``scale_factor`` is set, the op is called with it instead of ``size``.
    ``call_form`` (see the module docstring) applies to ``interp`` rows called with ``size``.
    """

    kind: str
    device: str
    shape: tuple[int, ...]
    dtype: str
    memory_format: str = CONTIGUOUS
    mode: str = "nearest"
    osize: tuple[int, ...] = ()
    scale_factor: float | None = None
    backward: bool = False
    call_form: str = "symbolic"

    @property
    def label(self) -> str:
        step = f" {TRAINING_STEP}" if self.backward else ""
        if self.kind == "interp":
            return f"Interpolate{step}, {self.device}"
        if self.kind == "fpn_neck":
            return f"FPN neck {TRAINING_STEP}, {self.device}"
        return f"Interpolate fused consumer{step}, {self.device}"

    @property
    def sub_label(self) -> str:
        layout = f"torch.{self.dtype}, torch.{self.memory_format}"
        if self.kind == "interp":
            op = f"mode: {self.mode}, align_corners: None, osize: {self.osize}"
            if self.scale_factor is not None:
                op += f", scale_factor: {self.scale_factor}"
            if self.call_form == "literal":
                op += ", size: literal"
            return f"Input {self.shape}, {layout} | {op}"
        if self.kind == "fpn_merge":
            return (
                f"FPN merge: lateral {self.output_shape} + interpolate(top {self.shape}, "
                f"scale_factor=2), {layout} | mode: {self.mode}"
            )
        if self.kind == "unet_skip":
            skip = (self.shape[0], self.shape[1], *self.osize)
            return (
                f"UNet skip: cat([skip {skip}, interpolate(x {self.shape}, scale_factor=2)], 1), "
                f"{layout} | mode: {self.mode}"
            )
        levels = self.neck_level_shapes
        return (
            f"FPN neck train step: {NECK_LEVELS} levels {levels[0]} .. {levels[-1]}, "
            f"out_channels: {NECK_OUT_CHANNELS}, {layout} | mode: {self.mode}"
        )

    @property
    def name(self) -> str:
        """Short unique id, shown in progress lines and matched by ``--filter``."""
        kind = self.kind + ("+bwd" if self.backward else "")
        shapes = f"{self.shape}->{self.osize}" if self.osize else f"{self.shape}"
        form = " size:literal" if self.call_form == "literal" else ""
        return f"{kind} {self.mode} {shapes} {self.dtype} {self.memory_format}{form}"

    @property
    def output_shape(self) -> tuple[int, ...]:
        n, c = self.shape[:2]
        channels = 2 * c if self.kind == "unet_skip" else c
        return (n, channels, *self.osize)

    @property
    def neck_level_shapes(self) -> tuple[tuple[int, ...], ...]:
        n, c, h, w = self.shape
        return tuple((n, c << i, h >> i, w >> i) for i in range(NECK_LEVELS))


def is_training_step(label: str) -> bool:
    """Whether a row of this label (``Case.label``) times forward + backward: the fwd+bwd rows
    and the FPN neck."""
    return TRAINING_STEP in label


def min_bytes(case: Case) -> int | None:
    """Minimal bytes the op must move (the roofline's numerator), or None for model rows.

    Forward: input elements actually read (along a downsampled dim only the
    sampled rows/cols) + output written. Backward: grad_output read +
    grad_input written; a fwd+bwd row counts both. Fused rows: every input
    read once + the output written once; their backward as the interpolation's (below).
    """
    if case.kind == "fpn_neck":
        return None
    n, c = case.shape[:2]
    insize, osize = case.shape[2:], case.osize
    in_numel, out_numel = n * c * math.prod(insize), n * c * math.prod(osize)
    esize = ELEMENT_SIZE[case.dtype]
    if case.kind in FUSED_KINDS:
        # Inputs: the low-resolution one and the full-resolution lateral / skip.
        forward = esize * (in_numel + out_numel + math.prod(case.output_shape))
        # The full-resolution input's gradient is grad_output itself (add) or a slice of it (cat),
        # a view: the backward moves the interpolation's bytes, its part of grad_output read and
        # the low-resolution gradient written.
        return forward + esize * (out_numel + in_numel) if case.backward else forward
    read = n * c * math.prod(min(i, o) for i, o in zip(insize, osize))
    forward = esize * (read + out_numel)
    return forward + esize * (out_numel + in_numel) if case.backward else forward


def scaled_size(spatial: tuple[int, ...], factor: float) -> tuple[int, ...]:
    """Output size of ``F.interpolate(scale_factor=factor)``: floor(size * factor)."""
    return tuple(math.floor(s * factor) for s in spatial)


def _scaled(device, shape, factor, dtype, memory_format, mode) -> Case:
    return Case(
        "interp", device, shape, dtype, memory_format, mode,
        osize=scaled_size(shape[2:], factor), scale_factor=float(factor),
    )


def _layouts(shape: tuple[int, ...]) -> tuple[str, ...]:
    channels_last = CHANNELS_LAST[len(shape) - 2]
    return (CONTIGUOUS,) if channels_last == CONTIGUOUS else (CONTIGUOUS, channels_last)


def _seed_cases(device: str, modes, call_forms) -> list[Case]:
    return [
        Case("interp", device, (bs, 3, *isize), dtype, fmt, mode, osize=osize, call_form=form)
        for (isize, osize), bs, dtype, fmt, mode, form in product(
            SEED_PAIRS[device], (1, 4), SEED_DTYPES[device], (CONTIGUOUS, "channels_last"), modes, call_forms
        )
    ]


def _scale_cases(device: str, modes) -> list[Case]:
    specs = [(UNET_SHAPE[device], f, ("bfloat16", "float32")) for f in (2, 4)]
    specs.append((SHAPE_1D, 2, EXTRA_DTYPES[device]))
    specs += [(SHAPE_3D, f, EXTRA_DTYPES[device]) for f in (2, 1.5)]
    if device == "cuda":
        specs.append((SHAPE_X15_F16, 1.5, ("float16",)))
    return [
        _scaled(device, shape, factor, dtype, fmt, mode)
        for shape, factor, dtypes in specs
        for dtype, fmt, mode in product(dtypes, _layouts(shape), modes)
    ]


def _fused_cases(device: str, modes) -> list[Case]:
    top = FUSED_TOP_SHAPE[device]
    return [
        Case(kind, device, top, "bfloat16", fmt, mode, osize=scaled_size(top[2:], 2), scale_factor=2.0)
        for kind, fmt, mode in product(FUSED_KINDS, _layouts(top), modes)
    ]


def _neck_cases(device: str, modes, dtypes=("float32", "bfloat16")) -> list[Case]:
    return [Case("fpn_neck", device, NECK_SHAPE[device], dtype, mode=mode) for dtype, mode in product(dtypes, modes)]


def _quick_interp_cases(device: str, modes, call_forms) -> list[Case]:
    if device == "cpu":
        # The seed's float32 contiguous rows are where stock compiled loses to eager most.
        seed = [((1, 3, 500, 400), (256, 256), "uint8", CONTIGUOUS),
                ((1, 3, 500, 400), (256, 256), "float32", CONTIGUOUS),
                ((1, 3, 300, 400), (600, 700), "float32", CONTIGUOUS),
                ((1, 3, 300, 400), (600, 700), "float32", "channels_last")]
        scaled = [(SHAPE_1D, 2, "float32", CONTIGUOUS), (SHAPE_3D, 1.5, "float32", CONTIGUOUS)]
    else:
        seed = [((1, 3, 2345, 2456), (1234, 1345), "float32", CONTIGUOUS),
                ((4, 3, 1234, 1345), (2345, 2456), "bfloat16", "channels_last")]
        scaled = [(UNET_SHAPE[device], 2, "bfloat16", "channels_last"), (SHAPE_3D, 1.5, "bfloat16", CONTIGUOUS)]
    return [
        Case("interp", device, shape, dtype, fmt, mode, osize=osize, call_form=form)
        for (shape, osize, dtype, fmt), mode, form in product(seed, modes, call_forms)
    ] + [
        _scaled(device, shape, factor, dtype, fmt, mode)
        for (shape, factor, dtype, fmt), mode in product(scaled, modes)
    ]


def _check_options(device: str, modes, call_forms) -> None:
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got {device!r}")
    if not modes or any(m not in MODES for m in modes):
        raise ValueError(f"modes must be a non-empty subset of {MODES}, got {modes!r}")
    if not call_forms or any(f not in CALL_FORMS for f in call_forms):
        raise ValueError(f"call_forms must be a non-empty subset of {CALL_FORMS}, got {call_forms!r}")


def make_cases(device: str, quick: bool = False, modes=MODES, backward: bool = False,
               call_forms=CALL_FORMS) -> list[Case]:
    """All benchmark cases for one run, in run order.

    ``quick`` keeps a small subset of the full matrix (on CPU it finishes in a
    few minutes on 2 cores, both tags and compile time included). ``backward``
    adds a fwd+bwd row for every floating-point ``interp`` and fused row. ``call_forms``
    selects the forms of the rows called with ``size``; the other rows have one form.
    """
    _check_options(device, modes, call_forms)
    modes, call_forms = tuple(modes), tuple(f for f in CALL_FORMS if f in call_forms)
    if quick:
        forward = _quick_interp_cases(device, modes, call_forms)
        kinds = ("fpn_merge",) if device == "cpu" else ("fpn_merge", "unet_skip")
        fused = [c for c in _fused_cases(device, modes) if c.kind in kinds and c.memory_format == CONTIGUOUS]
        neck = _neck_cases(device, modes[:1], dtypes=("float32" if device == "cpu" else "bfloat16",))
    else:
        forward = _seed_cases(device, modes, call_forms) + _scale_cases(device, modes)
        fused = _fused_cases(device, modes)
        neck = _neck_cases(device, modes)
    backward_rows = [replace(c, backward=True) for c in forward if backward and c.dtype in FLOAT_DTYPES]
    fused_backward = [replace(c, backward=True) for c in fused if backward and c.dtype in FLOAT_DTYPES]
    return forward + backward_rows + fused + fused_backward + neck
