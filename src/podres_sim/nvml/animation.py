"""The fake NVML's random walk: how an animated GPU's values move at each step.

``animate`` moves one GPU (its MIG devices, processes, utilisation, power,
temperature, clocks and PCIe traffic) one seeded step around its ``load``, and
records a utilisation sample per process, as NVML does.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import pynvml

from podres_sim.nvml.board import MIB, SAMPLE_BUFFER, FakeGpu, FakeProcess, FakeSample

__all__ = ["animate", "clamp", "walk_processes"]


def clamp(value: float, low: float, high: float) -> float:
    """``value`` within ``[low, high]``."""
    return max(low, min(high, value))


def animate(gpu: FakeGpu, dt: float, rng: random.Random, now_us: int) -> None:
    """Move ``gpu`` one step of ``dt`` seconds (``now_us``: the driver's clock)."""
    limit = gpu.power_limit_mw
    if gpu.mig_mode == pynvml.NVML_DEVICE_MIG_ENABLE:
        migs = [m for m in gpu.mig_devices if m is not None]
        for mig in migs:
            walk_processes(mig.processes, mig.memory_total, rng)
            mig.memory_used = sum(p.used_memory or 0 for p in mig.processes)
        gpu.memory_used = sum(m.memory_used for m in migs) + 600 * MIB
        load = sum(m.load for m in migs) / max(1, len(migs))
    else:
        load = gpu.load
        walk_processes(gpu.processes, gpu.memory_total, rng)
        used = sum(p.used_memory or 0 for p in gpu.processes)
        gpu.memory_used = min(gpu.memory_total, used + 600 * MIB)
    if load <= 0 or not (gpu.processes or gpu.mig_devices):
        util = 0.0
    else:
        util = gpu.utilization_gpu + 0.35 * (load * 100 - gpu.utilization_gpu)
        util = clamp(util + rng.gauss(0, 6), 1, 100)
    gpu.utilization_gpu = round(util)
    gpu.utilization_memory = round(clamp(util * 0.55 + rng.gauss(0, 3), 0, 100)) if util else 0
    idle = 0.1 * limit
    power = idle + (0.85 * limit - idle) * util / 100 + rng.gauss(0, 0.01 * limit)
    gpu.power_usage_mw = round(clamp(power, 0.08 * limit, limit))
    target = 28 + 50 * gpu.power_usage_mw / limit
    gpu.temperature_c = round(gpu.temperature_c + 0.3 * (target - gpu.temperature_c))
    capped = gpu.power_usage_mw > 0.95 * limit
    if util == 0:
        gpu.sm_clock_mhz = 345
        gpu.clock_event_reasons = pynvml.nvmlClocksEventReasonGpuIdle
    else:
        gpu.sm_clock_mhz = gpu.max_sm_clock_mhz - (150 if capped else 0)
        gpu.clock_event_reasons = pynvml.nvmlClocksEventReasonSwPowerCap if capped else 0
    gpu.pcie_tx_kbps = round(util / 100 * rng.uniform(0.5e6, 4e6))
    gpu.pcie_rx_kbps = round(util / 100 * rng.uniform(0.5e6, 8e6))
    # NVML samples only processes that used the GPU in the window: none when idle.
    if gpu.mig_mode != pynvml.NVML_DEVICE_MIG_ENABLE and gpu.processes and util > 0:
        share = util / len(gpu.processes)
        for proc in gpu.processes:
            sm = round(clamp(share + rng.gauss(0, 3), 0, 100))
            gpu.samples.append(FakeSample(proc.pid, now_us, sm, round(clamp(sm * 0.5, 0, 100))))
        del gpu.samples[:-SAMPLE_BUFFER]


def walk_processes(processes: Sequence[FakeProcess], capacity: int, rng: random.Random) -> None:
    """Drift each process's memory by a few percent, within the device."""
    if not processes:
        return
    limit = capacity * 0.95 / len(processes)
    for proc in processes:
        if proc.used_memory is not None:
            drifted = proc.used_memory * (1 + rng.gauss(0, 0.02))
            proc.used_memory = int(clamp(drifted, 64 * MIB, limit))
