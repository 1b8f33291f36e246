"""The Llama 3 interruption table: the default failure classes of ``trainchaos simulate``.

Source: A. Grattafiori et al. (Meta), *The Llama 3 Herd of Models*, arXiv:2407.21783 (2024),
section 3.3.4 "Reliability and Operational Challenges", Table 5: root-cause categorization
of the 419 unexpected interruptions during a 54-day snapshot of Llama 3 405B pre-training on
16,384 H100 GPUs (2,048 Grand Teton nodes of 8 GPUs). The same snapshot also had 47 planned
interruptions (automated maintenance such as firmware upgrades), 466 in all.

The counts below are the table's and add up to the stated 419. The paper's percentage
column is of the 419 too (72 / 419 = 17.2 %), except for "Faulty GPU": it prints 30.1 %
(126 / 419) next to a count of 148 (35.3 %), and the text's "58.7 % GPU issues" matches 126
as well. Only the counts add up to the published total, so the shares used (and tested)
here are count / 419.

Rates: GPU-side classes fail per device-hour (count / (16,384 x 1,296 h)); host-side classes
per node-hour (count / (2,048 x 1,296 h)), so a job of another size or node shape scales each
the way it physically would. ``scope`` says what one failure destroys, for checkpoint tiers
and spares (``docs/scale.md``): ``process`` (the job's processes only: host memory, disks and
the node survive), ``device`` (one GPU: the node is taken out for repair), ``node``.

``fault_types`` is the mapping used by ``--from-runs``: the trainchaos fault types whose
measured detection and restart stand for the class (a configuration may override it). Each
fault type says which classes it stands for (``FaultType.stands_for``, with the reasons
there), so a family that adds a type extends the mapping without an edit here. A class with
no fault type that exercises it (silent data corruption: detection of a bit flip needs the
corruption family) must get its figures by hand or from ``class_defaults``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["LLAMA3_CLASSES", "LLAMA3_DAYS", "LLAMA3_DEVICES", "LLAMA3_DEVICES_PER_NODE",
           "LLAMA3_SOURCE", "LLAMA3_UNEXPECTED", "Llama3Class",
           "default_class_dicts", "default_fault_types"]

LLAMA3_SOURCE = ("Grattafiori et al. (Meta), The Llama 3 Herd of Models, arXiv:2407.21783 "
                 "(2024), Table 5: 419 unexpected interruptions in a 54-day snapshot on "
                 "16,384 H100 GPUs")
LLAMA3_DEVICES = 16_384
LLAMA3_DEVICES_PER_NODE = 8
LLAMA3_DAYS = 54
LLAMA3_UNEXPECTED = 419


@dataclass(frozen=True)
class Llama3Class:
    name: str
    label: str
    count: int
    """Interruptions of this class in the 54-day snapshot (Table 5)."""
    per: str
    """``device`` or ``node``: what the rate is counted per."""
    scope: str

    @property
    def fault_types(self) -> tuple[str, ...]:
        """The fault types whose runs measure this class (``FaultType.stands_for``)."""
        from chaos.faults.base import types_standing_for

        return types_standing_for(self.name)


LLAMA3_CLASSES: tuple[Llama3Class, ...] = (
    Llama3Class("faulty_gpu", "Faulty GPU", 148, "device", "device"),
    Llama3Class("gpu_hbm3_memory", "GPU HBM3 Memory", 72, "device", "device"),
    Llama3Class("software_bug", "Software Bug", 54, "device", "process"),
    Llama3Class("network_switch_cable", "Network Switch/Cable", 35, "node", "node"),
    Llama3Class("host_maintenance", "Host Maintenance (unplanned)", 32, "node", "node"),
    Llama3Class("gpu_sram_memory", "GPU SRAM Memory", 19, "device", "device"),
    Llama3Class("gpu_system_processor", "GPU System Processor", 17, "device", "device"),
    Llama3Class("nic", "NIC", 7, "node", "node"),
    Llama3Class("nccl_watchdog_timeouts", "NCCL Watchdog Timeouts", 7, "device", "process"),
    Llama3Class("silent_data_corruption", "Silent Data Corruption", 6, "device", "device"),
    Llama3Class("gpu_thermal_interface_sensor", "GPU Thermal Interface + Sensor", 6, "device", "device"),
    Llama3Class("ssd", "SSD", 3, "node", "node"),
    Llama3Class("power_supply", "Power Supply", 3, "node", "node"),
    Llama3Class("server_chassis", "Server Chassis", 2, "node", "node"),
    Llama3Class("io_expansion_board", "IO Expansion Board", 2, "node", "node"),
    Llama3Class("dependency", "Dependency", 2, "device", "process"),
    Llama3Class("cpu", "CPU", 2, "node", "node"),
    Llama3Class("system_memory", "System Memory", 2, "node", "node"),
)

_HOURS = LLAMA3_DAYS * 24


def default_class_dicts() -> list[dict[str, Any]]:
    """The table as configuration entries (``classes:`` in a scale config), rates per hour."""
    out = []
    for c in LLAMA3_CLASSES:
        if c.per == "device":
            rate = {"rate_per_device_hour": c.count / (LLAMA3_DEVICES * _HOURS)}
        else:
            rate = {"rate_per_node_hour": c.count / (LLAMA3_DEVICES // LLAMA3_DEVICES_PER_NODE * _HOURS)}
        out.append({"name": c.name, "label": c.label, **rate, "scope": c.scope,
                    "fault_types": list(c.fault_types)})
    return out


def default_fault_types(name: str) -> tuple[str, ...]:
    """The ``--from-runs`` mapping of a class named as in the table; () for other names."""
    for c in LLAMA3_CLASSES:
        if c.name == name:
            return c.fault_types
    return ()
