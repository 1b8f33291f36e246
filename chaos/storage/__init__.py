"""Storage faults: a FUSE pass-through layer mounted over the workload's checkpoint and data
directories, whose rules (stall, slow, error, disk full, corruption, lost unfsynced data) are
changed at run time through a control file, without remounting. docs/storage.md has the
design; ``chaos.faults.storage`` the fault types that drive it.
"""
