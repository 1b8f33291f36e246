"""Plumbing every layer uses, none of it about chaos: a file no reader sees half of,
strict JSON values, a run's processes found by its id, the generic registry (built-ins by
module name, plugins, entry points), the YAML reader with located errors, and SIGINT/SIGTERM
handling that never cuts a revert short.
"""
