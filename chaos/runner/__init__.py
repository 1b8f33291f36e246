"""The engine that drives runs: scenario + seed -> plan, one run's loop and its measuring,
one fault from due to gone, the verdict, suites, the checkpoint durability sweep, and
``trainchaos cleanup`` after a killed controller. It uses the backends, the workloads
and the faults, never the reverse.
"""
