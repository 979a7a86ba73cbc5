"""Write nvitop-exporter's ``/metrics`` text for one real ``nvidia-smi -q -x`` capture.

No public repository keeps a scrape of nvitop-exporter, so this runs the exporter's own code
(``nvitop-exporter`` from PyPI, not part of cudamagic's dependencies) over the stand-in NVML library
(``tests/nvml_stub``) playing a real capture, and prints what its registry exposes: the metric
names, labels and values exactly as the exporter writes them. Host metrics are left out (they would
describe the machine this runs on); the GPU series are all there.

Usage: pip install nvitop-exporter==1.7.2 (in a separate environment or ``--target`` directory on
PYTHONPATH), then
    python scripts/make_nvitop_scrape.py tests/data/real/telegraf-rtx-3060-r570.xml > out.prom
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main(capture: str, hostname: str = "gpu-host-01") -> str:
    """The exporter's exposition text for ``capture`` (a path to an ``nvidia-smi -q -x`` file)."""
    from nvitop import Device
    from nvitop_exporter import PrometheusExporter
    from prometheus_client import CollectorRegistry, generate_latest

    from tests import nvml_stub
    from tests import real_captures as rc

    nvml_stub.install(rc.scenario(rc.parse(capture)))
    registry = CollectorRegistry(auto_describe=True)
    exporter = PrometheusExporter(Device.all(), hostname=hostname, registry=registry)
    for device in exporter.devices:  # one round of the exporter's loop, GPUs only
        exporter.update_device(device)
    return generate_latest(registry).decode()


if __name__ == "__main__":
    sys.stdout.write(main(sys.argv[1]))
