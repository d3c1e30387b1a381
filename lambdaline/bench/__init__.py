"""``lambdaline bench``: one seeded dataset through both layers, side by side.

``measure`` holds the measuring instruments (CPU seconds from the kernel's own
accounting, percentiles, the machine), ``peer`` the single-machine DuckDB SQL
peer of the batch recompute, ``load`` the open-loop HTTP load generator, and
``run`` the benchmark itself with its results.json, report.md and charts.
"""
