"""The built-in metric families, one module each defining ``FAMILY`` (a ``MetricFamily``);
``chaos.metrics.family`` loads every module here, so adding a family is adding a module."""
