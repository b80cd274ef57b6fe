"""Reading a /metrics body in tests with prometheus-client's own parser."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def samples(text: str) -> dict[str, float]:
    """``name{label="value",...}`` (labels in exposition order, unescaped) → value."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sample.labels.items())
            out[sample.name + ("{" + labels + "}" if labels else "")] = sample.value
    return out


def family_types(text: str) -> dict[str, str]:
    """Each family's exposed name (its ``# TYPE`` line) → its type."""
    out = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            out[name] = kind
    return out
