"""Reading a dashboard's JSON back: its panels, their queries, and the metric names a query
reads, so the tests can check what Grafana will run rather than what the builders meant.

The metric names are found without a PromQL parser: string literals, label lists and
matchers, ranges, numbers and PromQL's own words are taken out, and what is left of the
identifiers are the metric names. promtool parses each query for real (the tests); this
only has to name the series, and a test keeps it honest on the queries the dashboards use.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

Json = dict[str, Any]

# Words PromQL gives a meaning to, which are no metric names where they stand alone.
KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless"}
    | {"offset", "atan2", "inf", "nan", "start", "end"}
)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_LABEL_LIST = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_IDENT = re.compile(r"(?<![\w.:])([A-Za-z_:][\w:]*)(\s*\()?")
# A dashboard variable in a query: $name or ${name}.
VARIABLE = re.compile(r"\$\{?(\w+)\}?")
# Grafana's query variables that are functions of its own, not PromQL.
_LABEL_VALUES = re.compile(r"^\s*label_values\((.*),\s*\w+\s*\)\s*$")


@dataclass(frozen=True)
class Query:
    """One target of one panel: where it is (dashboard uid, panel title, refId) and its text."""

    dashboard: str
    panel: str
    ref: str
    expr: str


def panels(dashboard: Json) -> Iterator[Json]:
    """Every panel that shows data (rows are headings; a collapsed row holds its panels)."""
    for panel in dashboard.get("panels") or []:
        if panel.get("type") == "row":
            yield from panel.get("panels") or []
        else:
            yield panel


def queries(dashboard: Json) -> list[Query]:
    """Every panel target's PromQL expression."""
    uid = str(dashboard.get("uid"))
    return [
        Query(uid, str(panel.get("title")), str(target.get("refId")), str(target["expr"]))
        for panel in panels(dashboard)
        for target in panel.get("targets") or []
    ]


def substituted(expr: str, values: Mapping[str, str]) -> str:
    """`expr` as Grafana would send it to Prometheus with these variable values (a variable
    without one is left as it is)."""
    return VARIABLE.sub(lambda m: values.get(m.group(1), m.group(0)), expr)


def variable_selectors(dashboard: Json) -> list[str]:
    """The series selectors the dashboard's query variables read (`label_values(sel, label)`);
    a bare `label_values(label)` reads no particular metric and gives none."""
    found = []
    for variable in (dashboard.get("templating") or {}).get("list") or []:
        if variable.get("type") != "query":
            continue
        text = variable.get("query")
        text = text.get("query") if isinstance(text, dict) else text
        match = _LABEL_VALUES.match(str(text))
        if match:
            found.append(match.group(1))
    return found


def decode_and_encode(text: str) -> str:
    """A dashboard's JSON decoded into the SDK's model of Grafana's schema and encoded again
    as the generator writes it (what a field the schema lacks, or of the wrong type, changes)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from grafana_foundation_sdk.cog.encoder import JSONEncoder
        from grafana_foundation_sdk.cog.plugins import register_default_plugins
        from grafana_foundation_sdk.models.dashboard import Dashboard

    register_default_plugins()  # so panels and queries decode into their own types
    model = Dashboard.from_json(json.loads(text))
    return JSONEncoder(sort_keys=True, indent=2).encode(model) + "\n"


def metric_names(expr: str) -> set[str]:
    """The metric names `expr` reads."""
    text = _STRING.sub('""', expr)
    text = _LABEL_LIST.sub(" ", text)
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    names = set()
    for match in _IDENT.finditer(text):
        word, call = match.group(1), match.group(2)
        if call or word in KEYWORDS or re.fullmatch(r"\d", word[0]):
            continue
        names.add(word)
    return names
