"""DDP with the decompositions: two ranks train an FPN neck compiled with the package installed.

The model is ``perf.bench.FPNNeck`` (1x1 lateral convs, a nearest top-down path, 3x3 output
convs) on four levels of 30x22, 15x11, 8x6 and 4x3: its upsamples are x2 (integer factor) and
8x6 -> 15x11 (a window gather). Each rank launches this file as a script (``RANK`` /
``WORLD_SIZE`` / ``MASTER_ADDR`` / ``MASTER_PORT``, as torchrun would) and, with
``torch.use_deterministic_algorithms(True)``:

1. wraps the neck in DDP (small buckets, so Dynamo's DDPOptimizer compiles several graphs),
   compiles it and runs ``STEPS`` SGD steps, each on its half of a global batch;
2. runs the same steps again from the same initial parameters: gradients must be bitwise equal
   (deterministic);
3. runs the same steps on the whole global batch in one process, eager, without DDP: gradients,
   parameters and the mean loss must agree within ``RTOL`` / ``ATOL`` (float32, TF32 off; the
   batch is reduced in another order).

The test then checks that both ranks hold bitwise equal gradients at every step, and that no
graph Inductor compiled (forward or backward) holds a scatter.

Backends: gloo on CPU (always), NCCL on two GPUs, one per rank (``torch.cuda.set_device``),
run where two GPUs are visible (skipped elsewhere, the reason naming how many are).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from datetime import timedelta

import pytest
import torch

WORLD_SIZE = 2
STEPS = 3
LOCAL_BATCH = 2
LEVELS = ((8, 30, 22), (16, 15, 11), (32, 8, 6), (64, 4, 3))  # (channels, rows, columns)
OUT_CHANNELS = 128  # 2.4 MB of parameters
BUCKET_CAP_MB = 1  # several DDP buckets, so several compiled graphs (1 MB: Dynamo's minimum)
RTOL, ATOL = 1e-4, 1e-5  # compiled DDP vs the single-process eager run
TIMEOUT_S = 600  # the whole run, both ranks, cold compile (about 60 s on a 2-core machine)
COLLECTIVE_TIMEOUT_S = 120  # a rank whose peer died fails instead of waiting 30 minutes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(backend: str, tmp_path) -> list[dict]:
    """Runs the two ranks; returns their JSON results (the gradients stay in ``tmp_path``)."""
    port = _free_port()
    procs = []
    for rank in range(WORLD_SIZE):
        env = dict(os.environ)
        env.update(
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE=str(WORLD_SIZE),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            OMP_NUM_THREADS="1",
            # Inductor compiles in-process (no compile-worker pool per rank)
            TORCHINDUCTOR_COMPILE_THREADS="1",
            # a cache hit would skip the decompositions and graphs this test checks; a cache
            # folder per rank shares no lock files with the other rank or the test process
            TORCHINDUCTOR_FORCE_DISABLE_CACHES="1",
            TORCHINDUCTOR_CACHE_DIR=os.fspath(tmp_path / f"inductor-rank{rank}"),
            DECOMPS_DDP_BACKEND=backend,
            DECOMPS_DDP_OUT=os.fspath(tmp_path / f"rank{rank}"),
        )
        if backend == "gloo":
            # loopback only (gloo otherwise binds the address the host name resolves to)
            env["GLOO_SOCKET_IFNAME"] = "lo"
        else:
            # no NVLink multicast (NVLS) in NCCL or symmetric memory; cuBLAS deterministic
            env.update(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1",
                       CUBLAS_WORKSPACE_CONFIG=":4096:8")
        procs.append(
            subprocess.Popen(
                [sys.executable, os.path.abspath(__file__)],
                env=env,
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    deadline = time.monotonic() + TIMEOUT_S
    outputs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            tails = [f"rank {r}:\n{q.communicate()[0][-3000:]}" for r, q in enumerate(procs)]
            pytest.fail(f"DDP run did not finish in {TIMEOUT_S} s\n" + "\n".join(tails))
        outputs.append(out)
    for rank, (p, out) in enumerate(zip(procs, outputs)):
        assert p.returncode == 0, f"rank {rank} failed:\n{out[-5000:]}"
    return [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(WORLD_SIZE)]


@pytest.mark.parametrize("backend", [
    pytest.param("gloo", id="gloo-cpu"),
    pytest.param("nccl", id="nccl-cuda", marks=pytest.mark.skipif(
        torch.cuda.device_count() < 2,
        reason=f"NCCL runs one rank per GPU: needs 2 GPUs, {torch.cuda.device_count()} visible")),
])
def test_ddp_training_matches_a_single_process_run(backend, tmp_path):
    results = _launch(backend, tmp_path)
    for rank, r in enumerate(results):
        assert r["installed"] and r["device"].startswith("cuda" if backend == "nccl" else "cpu"), r
        assert r["frames"] >= 1, "nothing was compiled"
        assert r["forward_decomposed"] and r["backward_decomposed"], r
        # forward and backward graphs of several DDP buckets, none with a scatter
        assert len(r["scatters"]) >= 4 and not any(r["scatters"]), r["scatters"]
        assert r["deterministic"], f"rank {rank}: a rerun of the same steps gave other gradients"
        assert r["mismatches"] == [], f"rank {rank} vs the single-process run: {r['mismatches']}"
    # each rank saw its own half of the batch; their mean loss is the global batch's
    for step in range(STEPS):
        losses = [r["losses"][step] for r in results]
        assert losses[0] != losses[1], "ranks should see different data"
        mean = sum(losses) / WORLD_SIZE
        reference = results[0]["reference_losses"][step]
        assert abs(mean - reference) <= RTOL * abs(reference), (step, mean, reference)
    # DDP averaged the gradients: both ranks hold the same ones, bit for bit
    grads = [torch.load(tmp_path / f"rank{rank}.pt") for rank in range(WORLD_SIZE)]
    assert len(grads[0]) == STEPS
    for step, (g0, g1) in enumerate(zip(*grads)):
        assert g0.keys() == g1.keys()
        for name in g0:
            assert torch.equal(g0[name], g1[name]), f"step {step}: {name} differs across ranks"


# ---------------------------------------------------------------------------------------------
# the worker (run as a script)


def _global_batch(step: int, device) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Features and targets of step ``step``, the whole global batch (the same on every rank)."""
    gen = torch.Generator().manual_seed(1000 + step)
    batch = LOCAL_BATCH * WORLD_SIZE
    features = [torch.randn(batch, c, h, w, generator=gen) for c, h, w in LEVELS]
    targets = [torch.randn(batch, OUT_CHANNELS, h, w, generator=gen) for _, h, w in LEVELS]
    return [f.to(device) for f in features], [t.to(device) for t in targets]


def _loss(model, features, targets) -> torch.Tensor:
    import torch.nn.functional as F

    return sum(F.mse_loss(out, target) for out, target in zip(model(*features), targets))


def _train(model, params, batches) -> tuple[list[dict], list[float]]:
    """SGD steps; per step the gradients (CPU copies, by parameter name) and the loss."""
    opt = torch.optim.SGD(params.values(), lr=0.1, momentum=0.9)
    grads, losses = [], []
    for features, targets in batches:
        opt.zero_grad(set_to_none=True)
        loss = _loss(model, features, targets)
        loss.backward()
        grads.append({name: p.grad.detach().cpu().clone() for name, p in params.items()})
        losses.append(loss.item())
        opt.step()
    return grads, losses


def _worker() -> None:
    import copy
    import faulthandler

    # A rank that hangs prints where, in the output the test reports, before the test gives up.
    faulthandler.dump_traceback_later(TIMEOUT_S - 60, exit=True)

    import torch.distributed as dist
    from torch._dynamo.testing import CompileCounterWithBackend
    from torch.nn.parallel import DistributedDataParallel as DDP

    import decomps
    from decomps import backward as bwd_module
    from decomps import forward as fwd_module
    from perf.bench import FPNNeck
    from tests.graphs import post_grad_graphs

    calls = {"forward": 0, "backward": 0}
    fwd_orig, bwd_orig = fwd_module.upsample_nearest, bwd_module.upsample_nearest_backward

    def fwd_spy(*args, **kwargs):
        calls["forward"] += 1
        return fwd_orig(*args, **kwargs)

    def bwd_spy(*args, **kwargs):
        calls["backward"] += 1
        return bwd_orig(*args, **kwargs)

    fwd_module.upsample_nearest = fwd_spy
    bwd_module.upsample_nearest_backward = bwd_spy

    rank = int(os.environ["RANK"])
    backend = os.environ["DECOMPS_DDP_BACKEND"]
    out_prefix = os.environ["DECOMPS_DDP_OUT"]
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        init_kwargs = {"device_id": device}
    else:
        device = torch.device("cpu")
        init_kwargs = {}
    torch.use_deterministic_algorithms(True)
    dist.init_process_group(
        backend,
        rank=rank,
        world_size=int(os.environ["WORLD_SIZE"]),
        timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S),
        **init_kwargs,
    )

    torch.manual_seed(0)
    model = FPNNeck(tuple(c for c, _, _ in LEVELS), OUT_CHANNELS, "nearest").to(device)
    initial = copy.deepcopy(model.state_dict())
    reference_model = copy.deepcopy(model)

    batches = [_global_batch(step, device) for step in range(STEPS)]
    local = slice(rank * LOCAL_BATCH, (rank + 1) * LOCAL_BATCH)
    local_batches = [([f[local] for f in fs], [t[local] for t in ts]) for fs, ts in batches]

    ddp = DDP(model, device_ids=[rank] if backend == "nccl" else None, bucket_cap_mb=BUCKET_CAP_MB)
    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(ddp, backend=counter)
    params = dict(model.named_parameters())
    with post_grad_graphs() as graphs:
        grads, losses = _train(compiled, params, local_batches)
        model.load_state_dict(initial)
        grads_again, _ = _train(compiled, params, local_batches)
    deterministic = all(
        torch.equal(a[name], b[name]) for a, b in zip(grads, grads_again) for name in a
    )

    reference_params = dict(reference_model.named_parameters())
    reference_grads, reference_losses = _train(reference_model, reference_params, batches)
    mismatches = []
    for step, (ours, expected) in enumerate(zip(grads, reference_grads)):
        for name in ours:
            try:
                torch.testing.assert_close(ours[name], expected[name], rtol=RTOL, atol=ATOL)
            except AssertionError as e:
                mismatches.append(f"step {step} grad {name}: {e}")
    for name, p in params.items():
        try:
            torch.testing.assert_close(p, reference_params[name], rtol=RTOL, atol=ATOL)
        except AssertionError as e:
            mismatches.append(f"param {name} after {STEPS} steps: {e}")

    torch.save(grads, f"{out_prefix}.pt")
    with open(f"{out_prefix}.json", "w") as f:
        json.dump(
            {
                "installed": decomps.is_installed(),
                "device": str(device),
                "frames": counter.frame_count,
                "forward_decomposed": calls["forward"] > 0,
                "backward_decomposed": calls["backward"] > 0,
                "scatters": [sorted(ops) for ops in graphs.scatters()],
                "deterministic": deterministic,
                "mismatches": mismatches,
                "losses": losses,
                "reference_losses": reference_losses,
            },
            f,
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    _worker()
