"""Build, check and time one case: eager vs ``torch.compile``.

Imported by ``perf.interp_mode`` only after it has set the Inductor cache
directory; importing this module imports torch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

try:
    import resource
except ImportError:  # Windows: no page fault counts
    resource = None

import torch
import torch.nn.functional as F
import torch.utils.benchmark as benchmark
from torch import nn

from perf import turns
from perf._tables import HOST_BOUND_SECONDS, OVERHEAD_LABEL, host_bound_threshold
from perf.cases import NECK_OUT_CHANNELS, Case, min_bytes

SEED = 12
COPY_BYTES = 1 << 30
# (rtol, atol) for gradients, whose sums may be accumulated in another order.
GRAD_TOLERANCE = {"float32": (1e-5, 1e-5), "float16": (5e-3, 5e-3), "bfloat16": (4e-2, 4e-2)}
# Relative L2 error allowed for the FPN neck (convolutions may pick other algorithms).
NECK_TOLERANCE = {"float32": 1e-3, "bfloat16": 3e-2}
REDUCE_OVERHEAD = "Compiled reduce-overhead"  # the column's description starts with this
# Calls of a compiled column before it is timed; its first and last results are checked. One-time
# work of the first calls stays out of the timing: CUDA graphs record at the second call and replay
# from the third; size variants (lowerings/size_variants.py) compile at a size's second launch.
# Timed inside blocked_autorange's first block, such work makes it choose blocks of one call, each
# synchronized: one call's latency instead of back-to-back throughput (an H200 row of 86 us of
# kernels then timed 165-187 us, 2026-11-24).
WARM_UP_CALLS = 3
KERNEL_CALLS = 10  # calls profiled for a CUDA column's kernel time
# A CUDA row whose compiled kernels take under this share of its compiled call is decided by the
# host: its late rounds sample another of the host's spells, as a host-bound row's do.
HOST_DECIDED_SHARE = 0.5
# The compiled call overhead rows: 8 elements, so that dynamic=True traces a symbolic size
# (sizes 0 and 1 are specialized). The second row (with --backward) is an empty compiled
# training step, timed like the fwd+bwd rows. Their label is _tables.OVERHEAD_LABEL.
OVERHEAD_SHAPE = (8,)
OVERHEAD_SUB_LABEL = f"Input {OVERHEAD_SHAPE}, torch.float32 | fn: x + 1"
STEP_OVERHEAD_SUB_LABEL = f"Input {OVERHEAD_SHAPE}, torch.float32 | fn: x * 2, fwd+bwd"


@dataclass
class Workload:
    """What a case runs: ``forward(*args)``, optionally followed by ``autograd.grad``."""

    forward: Callable
    args: tuple[torch.Tensor, ...]
    wrt: tuple[torch.Tensor, ...] = ()  # differentiate w.r.t. these; empty: forward only
    grad_outputs: tuple[torch.Tensor, ...] = ()
    check: str = "equal"  # "equal" | "allclose" | "relnorm"
    # Its compiled graph calls extern kernels (convolutions) whose host cost is about eager's
    # whole step: timed under mode="reduce-overhead" too, whatever its eager time.
    host_heavy: bool = False

    def runner(self, forward: Callable) -> Callable:
        """The callable that is timed: ``forward`` alone, or forward + backward."""
        if not self.wrt:
            return forward

        def step(*args):
            outputs = _as_tuple(forward(*args))
            return torch.autograd.grad(outputs, self.wrt, self.grad_outputs)

        return step


@dataclass
class CaseResult:
    """One row's columns: a Measurement per column, in column order (Eager, Compiled; or the
    Compiled reduce-overhead column alone).

    Each Measurement is the one with the lowest median of the run's repeats; the dicts are keyed
    by the column's description.
    """

    measurements: list
    problems: dict = field(default_factory=dict)  # compiled column -> how it differs from eager
    compile_seconds: dict = field(default_factory=dict)  # compiled column -> seconds of its first call
    spread: dict = field(default_factory=dict)  # column -> {"min", "max", "n"} of the repeats' medians
    roofline: dict = field(default_factory=dict)  # column -> {"bytes", "gbps", "pct_of_copy"}
    page_faults: dict = field(default_factory=dict)  # CPU column -> minor page faults per call (kept round)
    kernel_us: dict = field(default_factory=dict)  # CUDA column -> us of GPU kernels per call (profiler)
    # wants a mode="reduce-overhead" column, timed after every case's plain columns (time_reduce_overhead)
    reduce_overhead: bool = False
    # eager's first round under the row's host-bound threshold (workload_host_bound_seconds)
    host_bound: bool = False
    # CUDA: the compiled kernels under HOST_DECIDED_SHARE of the compiled call (host_decided)
    host_decided: bool = False

    @property
    def late_rounds(self) -> bool:
        """The row is timed again after the process's last case (``--late-rounds``)."""
        return self.host_bound or self.host_decided


class FPNNeck(nn.Module):
    """torchvision-style FPN: 1x1 lateral convs, nearest top-down path, 3x3 output convs."""

    def __init__(self, in_channels: tuple[int, ...], out_channels: int, mode: str):
        super().__init__()
        self.lateral = nn.ModuleList(nn.Conv2d(c, out_channels, 1) for c in in_channels)
        self.output = nn.ModuleList(nn.Conv2d(out_channels, out_channels, 3, padding=1) for _ in in_channels)
        self.mode = mode

    def forward(self, *features: torch.Tensor) -> tuple[torch.Tensor, ...]:
        last = self.lateral[-1](features[-1])
        outputs = [self.output[-1](last)]
        for i in range(len(features) - 2, -1, -1):
            lateral = self.lateral[i](features[i])
            last = lateral + F.interpolate(last, size=lateral.shape[-2:], mode=self.mode)
            outputs.insert(0, self.output[i](last))
        return tuple(outputs)


class LateralOnlyNeck(FPNNeck):
    """``FPNNeck`` without its top-down path: each level's output convolution of its lateral
    convolution. Every convolution of the neck, none of its upsampling or adds; its training step
    bounds from below the neck's with any formulation of the upsampling."""

    def forward(self, *features: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(out(lateral(x)) for lateral, out, x in zip(self.lateral, self.output, features))


def _as_tuple(value) -> tuple:
    return value if isinstance(value, tuple) else (value,)


def _random(shape, dtype: torch.dtype, device: str, memory_format=torch.contiguous_format) -> torch.Tensor:
    if dtype.is_floating_point:
        x = torch.randn(shape, dtype=dtype, device=device)
    else:
        x = torch.randint(0, 256, shape, dtype=dtype, device=device)
    return x.contiguous(memory_format=memory_format)


def _interp_kwargs(case: Case) -> dict:
    if case.scale_factor is None:
        return {"size": case.osize, "mode": case.mode}
    return {"scale_factor": case.scale_factor, "mode": case.mode}


def literal_interpolate(osize, mode: str) -> Callable:
    """``lambda x: F.interpolate(x, size=(600, 700), mode="nearest")``, the size written as constants;
    a new code object per call (Dynamo keys its cache on the code).

    Built from source because Dynamo traces ints of a closure (``_interp_workload``'s form) or of
    a ``functools.partial`` as symbols under ``dynamic=True``; only constants of the code stay static.
    """
    return eval(f"lambda x: F.interpolate(x, size={tuple(osize)!r}, mode={mode!r})", {"F": F})


def _interp_workload(case: Case, dtype, memory_format) -> Workload:
    if case.call_form == "literal":
        interpolate = literal_interpolate(case.osize, case.mode)
    else:
        kwargs = _interp_kwargs(case)

        def interpolate(x):
            return F.interpolate(x, **kwargs)

    x = _random(case.shape, dtype, case.device, memory_format)
    if not case.backward:
        return Workload(interpolate, (x,))
    x.requires_grad_(True)
    with torch.no_grad():
        grad_output = torch.randn_like(interpolate(x))
    return Workload(interpolate, (x,), wrt=(x,), grad_outputs=(grad_output,), check="allclose")


def _fused_workload(case: Case, dtype, memory_format) -> Workload:
    mode = case.mode

    def fpn_merge(lateral, top):
        return lateral + F.interpolate(top, scale_factor=2.0, mode=mode)

    def unet_skip(skip, x):
        return torch.cat([skip, F.interpolate(x, scale_factor=2.0, mode=mode)], 1)

    forward = fpn_merge if case.kind == "fpn_merge" else unet_skip
    full_res = _random((*case.shape[:2], *case.osize), dtype, case.device, memory_format)
    low_res = _random(case.shape, dtype, case.device, memory_format)
    if not case.backward:
        return Workload(forward, (full_res, low_res))
    inputs = (full_res.requires_grad_(True), low_res.requires_grad_(True))
    with torch.no_grad():
        grad_output = torch.randn_like(forward(*inputs))
    return Workload(forward, inputs, wrt=inputs, grad_outputs=(grad_output,), check="allclose")


def _neck_workload(case: Case, dtype, memory_format) -> Workload:
    shapes = case.neck_level_shapes
    model = FPNNeck(tuple(s[1] for s in shapes), NECK_OUT_CHANNELS, case.mode).to(case.device, dtype)
    features = tuple(_random(s, dtype, case.device, memory_format).requires_grad_(True) for s in shapes)
    with torch.no_grad():
        grad_outputs = tuple(torch.randn_like(y) for y in model(*features))
    wrt = (*model.parameters(), *features)
    return Workload(model, features, wrt=wrt, grad_outputs=grad_outputs, check="relnorm", host_heavy=True)


BUILDERS = {"interp": _interp_workload, "fpn_merge": _fused_workload, "unet_skip": _fused_workload,
            "fpn_neck": _neck_workload}


def build_workload(case: Case) -> Workload:
    torch.manual_seed(SEED)
    return BUILDERS[case.kind](case, getattr(torch, case.dtype), getattr(torch, case.memory_format))


def _describe_difference(actual: torch.Tensor, expected: torch.Tensor) -> str:
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return f"got {tuple(actual.shape)} {actual.dtype}, expected {tuple(expected.shape)} {expected.dtype}"
    diff = (actual.double() - expected.double()).abs()
    return f"{int((diff > 0).sum())} of {diff.numel()} elements differ, max abs diff {diff.max().item():.3g}"


def _close(actual: torch.Tensor, expected: torch.Tensor, check: str, dtype: str) -> bool:
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return False
    if check == "equal":
        return torch.equal(actual, expected)
    if check == "allclose":
        rtol, atol = GRAD_TOLERANCE[dtype]
        return torch.allclose(actual, expected, rtol=rtol, atol=atol)
    error = (actual.double() - expected.double()).norm() / expected.double().norm().clamp_min(1e-12)
    return error.item() <= NECK_TOLERANCE[dtype]


def compare_results(actual, expected, check: str, dtype: str) -> str | None:
    """None when the compiled result matches eager, else a description of the first difference."""
    actual, expected = _as_tuple(actual), _as_tuple(expected)
    if len(actual) != len(expected):
        return f"compiled returned {len(actual)} tensors, eager {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        if not _close(a, e, check, dtype):
            return f"output {i} ({check}): {_describe_difference(a, e)}"
    return None


def _timer(fn: Callable, args: tuple, label: str, sub_label: str, description: str,
           num_threads: int) -> benchmark.Timer:
    return benchmark.Timer(
        stmt="fn(*args)",
        globals={"fn": fn, "args": args},
        num_threads=num_threads,
        label=label,
        sub_label=sub_label,
        description=description,
    )


def kernel_us(call: Callable, calls: int = KERNEL_CALLS) -> float:
    """us of GPU kernels per ``call()`` (profiler): what the call costs the device, without the
    host."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    return sum(e.time_range.elapsed_us() for e in prof.events() if e.device_type == DeviceType.CUDA) / calls


def _synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def wants_reduce_overhead(device: str, eager_seconds: float, host_bound_seconds: float = HOST_BOUND_SECONDS,
                          host_heavy: bool = False) -> bool:
    """Whether a row also gets a ``mode="reduce-overhead"`` column: host-bound rows (eager below
    ``host_bound_seconds``, see ``workload_host_bound_seconds``) and ``Workload.host_heavy`` ones,
    CUDA only (CUDA graphs replay a whole call without its host cost)."""
    return device == "cuda" and (host_heavy or eager_seconds < host_bound_seconds)


def workload_host_bound_seconds(work: Workload, step_overhead_seconds: float | None) -> float:
    """The host-bound threshold of a workload: 100 us, or for a fwd+bwd one the run's empty compiled
    step (``step_overhead_seconds``, None when not measured) where that is longer; the tables'
    ``host-bound`` note uses the same rule."""
    return host_bound_threshold(bool(work.wrt), step_overhead_seconds)


def _minor_faults() -> int | None:
    return None if resource is None else resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def calls_of(measurement) -> int:
    """The calls ``blocked_autorange`` made for ``measurement``: its timed blocks and the blocks of
    1, 10, ... calls with which it chose their size."""
    number = measurement.number_per_run
    return number * len(measurement.raw_times) + (10 * number - 1) // 9


def pick_best(measurements: list) -> tuple:
    """The Measurement with the lowest median, and the spread {"min", "max", "n"} of all medians."""
    medians = [m.median for m in measurements]
    best = measurements[medians.index(min(medians))]
    return best, {"min": min(medians), "max": max(medians), "n": len(medians)}


class _Columns:
    """The timed columns of one workload in one process: each column's callable, its rounds of
    ``blocked_autorange`` and, on the CPU, its page faults per call."""

    def __init__(self, work: Workload, label: str, sub_label: str, dtype: str, device: str, tag: str,
                 num_threads: int) -> None:
        self.work, self.label, self.sub_label, self.dtype = work, label, sub_label, dtype
        self.device, self.tag, self.num_threads = device, tag, num_threads
        self.result = CaseResult([])
        self.columns: dict[str, Callable] = {}
        self.rounds: dict[str, list] = {}
        self.faults: dict[str, list] = {}

    def description(self, kind: str) -> str:
        return f"{kind} ({torch.__version__}) {self.tag}"

    def add(self, kind: str, fn: Callable) -> None:
        self.columns[kind], self.rounds[kind] = fn, []

    def add_compiled(self, kind: str, dynamic: bool, **options) -> None:
        """Compile ``work.forward`` for column ``kind`` and call it ``WARM_UP_CALLS`` times, its
        first and last results checked against eager's."""
        work, column = self.work, self.description(kind)
        fn = work.runner(torch.compile(work.forward, fullgraph=True, dynamic=dynamic, **options))
        expected = work.runner(work.forward)(*work.args)
        start = time.perf_counter()
        actual = fn(*work.args)
        _synchronize(self.device)
        self.result.compile_seconds[column] = time.perf_counter() - start
        # checked before the next call: under CUDA graphs a replay overwrites the last outputs
        problem = compare_results(actual, expected, work.check, self.dtype)
        for _ in range(WARM_UP_CALLS - 1):
            actual = fn(*work.args)
        _synchronize(self.device)
        problem = problem or compare_results(actual, expected, work.check, self.dtype)
        if problem:
            self.result.problems[column] = problem
        self.add(kind, fn)

    def time_round(self, min_run_time: float) -> None:
        """Every column once (``blocked_autorange``), so that a slow spell of a noisy machine hits
        every column alike; with ``--lockstep``, the partner tag's process times the same column
        after each (``perf.turns``)."""
        for kind, fn in self.columns.items():
            timer = _timer(fn, self.work.args, self.label, self.sub_label, self.description(kind), self.num_threads)
            # pages the allocator gave back and the calls touched again: they can decide a CPU row
            before = _minor_faults() if self.device == "cpu" else None
            self.rounds[kind].append(timer.blocked_autorange(min_run_time=min_run_time))
            if before is not None:
                self.faults.setdefault(kind, []).append((_minor_faults() - before) / calls_of(self.rounds[kind][-1]))
            turns.TURNS.pass_turn()  # with --lockstep: the partner tag's process times its column now

    def add_kernel_times(self) -> None:
        """Each column's GPU kernel time per call (``kernel_us``), into the result."""
        for kind, fn in self.columns.items():
            try:
                self.result.kernel_us[self.description(kind)] = kernel_us(lambda fn=fn: fn(*self.work.args))
            except Exception as e:  # a profiler that cannot run costs the cell its kernel time only
                print(f"no kernel time for {kind} ({self.sub_label}): {type(e).__name__}: {e}", flush=True)

    def finish(self) -> CaseResult:
        """The result: per column the round with the lowest median, and the spread of all."""
        result = self.result
        for kind, measurements in self.rounds.items():
            best, spread = pick_best(measurements)
            result.measurements.append(best)
            result.spread[best.task_spec.description] = spread
            if self.faults.get(kind):
                result.page_faults[best.task_spec.description] = self.faults[kind][measurements.index(best)]
        return result


def time_workload(work: Workload, label: str, sub_label: str, dtype: str, device: str, tag: str, *,
                  dynamic: bool, num_threads: int, min_run_time: float, repeat: int = 1,
                  step_overhead_seconds: float | None = None, kernels: bool = True) -> CaseResult:
    """The Eager and Compiled columns: the compiled one called ``WARM_UP_CALLS`` times (its first
    and last results checked against eager), then both timed in ``repeat`` interleaved rounds,
    each column keeping its lowest median; on CUDA, each column's kernels per call.

    ``result.reduce_overhead`` says whether the row also gets a ``mode="reduce-overhead"`` column
    (``wants_reduce_overhead``, on the first round's eager time against
    ``workload_host_bound_seconds``, or ``work.host_heavy``), which ``time_reduce_overhead`` times
    after every case's plain columns: once a CUDA graph has run in a process, a later plain
    compiled call can take longer (docs/findings.md, finding 8). ``step_overhead_seconds``: the
    run's empty compiled fwd+bwd step, if measured.
    """
    torch._dynamo.reset()
    columns = _Columns(work, label, sub_label, dtype, device, tag, num_threads)
    columns.add("Eager", work.runner(work.forward))
    columns.add_compiled("Compiled", dynamic)
    for _ in range(repeat):
        columns.time_round(min_run_time)
    eager_seconds = columns.rounds["Eager"][0].median
    host_bound_seconds = workload_host_bound_seconds(work, step_overhead_seconds)
    result = columns.finish()
    result.reduce_overhead = wants_reduce_overhead(device, eager_seconds, host_bound_seconds, work.host_heavy)
    result.host_bound = eager_seconds < host_bound_seconds
    if device == "cuda" and kernels:  # a row whose kernels are shorter than its call is decided by the host
        columns.add_kernel_times()
        result.host_decided = host_decided(result, columns.description("Compiled"))
    return result


def host_decided(result: CaseResult, compiled: str) -> bool:
    """Whether the ``compiled`` column's kernels take under ``HOST_DECIDED_SHARE`` of its call
    (False where its kernel time is unknown): the host's spells decide such a row, whatever its
    eager time (a training step whose kernels are a fraction of eager's, docs/findings.md,
    finding 8)."""
    if compiled not in result.kernel_us:
        return False
    median = next(m.median for m in result.measurements if m.task_spec.description == compiled)
    return result.kernel_us[compiled] * 1e-6 < HOST_DECIDED_SHARE * median


def time_reduce_overhead(work: Workload, label: str, sub_label: str, dtype: str, device: str, tag: str, *,
                         dynamic: bool, num_threads: int, min_run_time: float, repeat: int = 1) -> CaseResult:
    """The ``mode="reduce-overhead"`` column of a row that ``time_workload`` found host-bound,
    compiled, checked against eager and timed in ``repeat`` rounds like the others, with its
    kernel time: the replayed graphs' kernels, the copies of the inputs into the graphs' buffers
    among them, so that a reader sees whether the device or the host decides the column."""
    torch._dynamo.reset()
    columns = _Columns(work, label, sub_label, dtype, device, tag, num_threads)
    columns.add_compiled(REDUCE_OVERHEAD, dynamic, mode="reduce-overhead")
    for _ in range(repeat):
        columns.time_round(min_run_time)
    result = columns.finish()
    if device == "cuda":
        columns.add_kernel_times()
    return result


def run_case(case: Case, tag: str, *, dynamic: bool, num_threads: int, min_run_time: float,
             copy_gbps: float | None = None, repeat: int = 1,
             step_overhead_seconds: float | None = None, kernels: bool = True) -> CaseResult:
    """Check compiled against eager once, then time the Eager and Compiled columns (compile time
    excluded). The workload is built anew at each call (the same values: ``build_workload``
    seeds its generator), so a row's late rounds time what its first ones did."""
    work = build_workload(case)
    result = time_workload(work, case.label, case.sub_label, case.dtype, case.device, tag, dynamic=dynamic,
                           num_threads=num_threads, min_run_time=min_run_time, repeat=repeat,
                           step_overhead_seconds=step_overhead_seconds, kernels=kernels)
    result.roofline = _roofline(case, result.measurements, copy_gbps)
    return result


def run_case_reduce_overhead(case: Case, tag: str, *, dynamic: bool, num_threads: int, min_run_time: float,
                             copy_gbps: float | None = None, repeat: int = 1) -> CaseResult:
    """The reduce-overhead column of a case that ``run_case`` found host-bound, on the case's
    workload built anew (the same values: ``build_workload`` seeds its generator)."""
    work = build_workload(case)
    result = time_reduce_overhead(work, case.label, case.sub_label, case.dtype, case.device, tag, dynamic=dynamic,
                                  num_threads=num_threads, min_run_time=min_run_time, repeat=repeat)
    result.roofline = _roofline(case, result.measurements, copy_gbps)
    return result


def call_overhead_workload(device: str) -> Workload:
    """A graph of one tiny op, ``x + 1`` on ``OVERHEAD_SHAPE`` elements: a compiled call's host cost."""

    def add_one(x):
        return x + 1

    return Workload(add_one, (torch.zeros(OVERHEAD_SHAPE, device=device),))


def empty_step_workload(device: str) -> Workload:
    """The empty training step: ``torch.autograd.grad`` of a one-op graph (``x * 2``) on
    ``OVERHEAD_SHAPE`` elements."""

    def double(x):
        return x * 2

    x = torch.zeros(OVERHEAD_SHAPE, device=device, requires_grad=True)
    grad_output = torch.ones(OVERHEAD_SHAPE, device=device)
    return Workload(double, (x,), wrt=(x,), grad_outputs=(grad_output,), check="allclose")


OVERHEAD_WORKLOADS = {OVERHEAD_SUB_LABEL: call_overhead_workload, STEP_OVERHEAD_SUB_LABEL: empty_step_workload}


def measure_call_overhead(device: str, tag: str, *, dynamic: bool, num_threads: int, min_run_time: float,
                          repeat: int = 1, kernels: bool = True) -> CaseResult:
    """The host cost of one compiled call: a graph of one tiny op (``x + 1``), eager vs compiled."""
    return time_workload(call_overhead_workload(device), f"{OVERHEAD_LABEL}, {device}", OVERHEAD_SUB_LABEL,
                         "float32", device, tag, dynamic=dynamic, num_threads=num_threads,
                         min_run_time=min_run_time, repeat=repeat, kernels=kernels)


def measure_step_overhead(device: str, tag: str, *, dynamic: bool, num_threads: int, min_run_time: float,
                          repeat: int = 1, kernels: bool = True) -> CaseResult:
    """The host cost of one compiled training step: ``torch.autograd.grad(compiled(x), x, g)`` of a
    one-op graph (``x * 2``), eager vs compiled; fwd+bwd rows faster than it in eager cannot be
    won by a compiled call."""
    return time_workload(empty_step_workload(device), f"{OVERHEAD_LABEL}, {device}", STEP_OVERHEAD_SUB_LABEL,
                         "float32", device, tag, dynamic=dynamic, num_threads=num_threads,
                         min_run_time=min_run_time, repeat=repeat, kernels=kernels)


def measure_overhead_reduce_overhead(sub_label: str, device: str, tag: str, *, dynamic: bool, num_threads: int,
                                     min_run_time: float, repeat: int = 1) -> CaseResult:
    """The reduce-overhead column of the overhead row ``sub_label`` (``OVERHEAD_WORKLOADS``)."""
    return time_reduce_overhead(OVERHEAD_WORKLOADS[sub_label](device), f"{OVERHEAD_LABEL}, {device}", sub_label,
                                "float32", device, tag, dynamic=dynamic, num_threads=num_threads,
                                min_run_time=min_run_time, repeat=repeat)


def _roofline(case: Case, measurements: list, copy_gbps: float | None) -> dict:
    nbytes = min_bytes(case)
    if copy_gbps is None or nbytes is None:
        return {}
    result = {}
    for m in measurements:
        gbps = nbytes / m.median / 1e9
        result[m.task_spec.description] = {"bytes": nbytes, "gbps": gbps, "pct_of_copy": 100 * gbps / copy_gbps}
    return result


def measure_copy_bandwidth(device: str, num_threads: int, min_run_time: float, nbytes: int = COPY_BYTES) -> float:
    """Device-to-device ``dst.copy_(src)`` bandwidth in GB/s, counting bytes read + written."""
    src = torch.ones(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    timer = benchmark.Timer(stmt="dst.copy_(src)", globals={"dst": dst, "src": src}, num_threads=num_threads)
    return 2 * nbytes / timer.blocked_autorange(min_run_time=min_run_time).median / 1e9
