"""The system under test: a small, real, deterministic, resilient DDP training job."""
