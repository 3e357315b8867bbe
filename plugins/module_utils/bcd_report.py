"""The JSON reports' schema version (docs/reports.md lists every report's keys).

Each report written to ``bcd_report_out`` (the GPU isolation report, rollout.yml's summary,
audit.yml's report, the fleet's report) carries ``schema_version`` at its top level, so that a
scheduler or an alert rule reading it can tell a format it knows. It grows by one when a key is
removed or changes its meaning; a key added leaves it as it is.
"""

from __future__ import annotations

REPORT_SCHEMA_VERSION = 1
