"""Scenario files -> validated ``Scenario`` records: one file, a suite of them, one
scenario under several values of an option (``run --compare``), the same fault on
several training stacks (``bench-stacks``).
"""
