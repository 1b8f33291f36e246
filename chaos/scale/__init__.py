"""The scale model: what the measured pieces add up to on a real cluster.

``trainchaos simulate CONFIG.yaml`` runs a vectorised Monte-Carlo model of a training job of
N accelerators over D days (failure classes with rates, planned maintenance, correlated
domain events, checkpoint policy and tiers, recovery by restart, spares or elastic
shrinking) and reports interruptions, effective training time ratio (ETTR), goodput and lost
GPU-hours by cause with confidence intervals, and the best checkpoint interval by Young/Daly
and by search. Per-class detection and restart figures come from the configuration or, with
``--from-runs``, from the journals of trainchaos runs. ``docs/scale.md`` is the reference.

Modules, one job each: ``config`` (schema and validation), ``yamlfile`` (reading YAML),
``issues`` (located errors),
``llama3`` (the default failure table and its source), ``runs`` (``--from-runs``),
``engine`` (the Monte-Carlo model), ``analytic`` (closed forms), ``sweep`` (``--sweep``),
``simulate`` (orchestration and statistics), ``report`` (text, Markdown, JSON, PNG).
"""

__all__: list[str] = []
