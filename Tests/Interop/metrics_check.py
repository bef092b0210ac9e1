"""Scrapes duplex-server's GET /metrics, parses it with prometheus_client (the Prometheus
project's Python client, an independent parser of the text exposition format), and checks
samples against minimums.

Usage: metrics_check.py PORT 'name{label="value",...}>=N' ...

Exits 1, naming the sample, when the exposition does not parse or a check fails.
"""
import re
import sys
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def main() -> int:
    port = int(sys.argv[1])
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        content_type = response.headers.get("Content-Type", "")
        text = response.read().decode("utf-8")
    if not content_type.startswith("text/plain; version=0.0.4"):
        print(f"FAIL: /metrics Content-Type is {content_type!r}")
        return 1
    samples = {}
    families = 0
    for family in text_string_to_metric_families(text):
        families += 1
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    for check in sys.argv[2:]:
        match = re.fullmatch(r'([a-z_]+)(?:\{(.*)\})?>=([0-9.]+)', check)
        if not match:
            print(f"FAIL: bad check {check!r}")
            return 1
        name, labels, minimum = match.group(1), match.group(2) or "", float(match.group(3))
        wanted = tuple(sorted(re.findall(r'([a-z_]+)="([^"]*)"', labels)))
        value = samples.get((name, wanted))
        if value is None:
            print(f"FAIL: no sample {name}{{{labels}}} in /metrics")
            return 1
        if value < minimum:
            print(f"FAIL: {name}{{{labels}}} is {value}, expected at least {minimum}")
            return 1
    print(f"metrics (prometheus_client): ok ({families} families, {len(samples)} samples, {len(sys.argv) - 2} checks)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
