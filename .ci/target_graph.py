#!/usr/bin/env python3
"""Checks that the package's imports point one way (issue 48): reads `swift package describe
--type json` on stdin and fails, naming the edge, when a target reaches what it must not."""
import json
import os
import sys

package = json.load(sys.stdin)
targets = {t["name"]: t for t in package["targets"]}


def closure(name):
    """The targets `name` depends on, directly or not, and every product they use."""
    seen, products, todo = set(), set(targets[name].get("product_dependencies", [])), [name]
    while todo:
        for dep in targets[todo.pop()].get("target_dependencies", []):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
                products |= set(targets[dep].get("product_dependencies", []))
    return seen, products


# What each target must not reach, target or product.
rules = {
    # The host knows no chat, no database, no client and no Prometheus.
    "DuplexHost": {"DuplexServer", "DuplexScripted", "DuplexRecordReplay", "DuplexPostgres", "Duplex", "Prometheus", "PostgresNIO"},
    # Chat is on the host and knows no server, no client and no database.
    "DuplexChat": {"DuplexServer", "DuplexScripted", "DuplexRecordReplay", "DuplexPostgres", "Duplex", "Prometheus", "PostgresNIO"},
    # Scripted routes are a route set on the host, not the server's: they know no chat. Their
    # proxy routes reach the user's backend with the Duplex client.
    "DuplexScripted": {"DuplexServer", "DuplexChat", "DuplexRecordReplay", "DuplexPostgres", "Prometheus", "PostgresNIO"},
    # Record and replay are on the host, not the server.
    "DuplexRecordReplay": {"DuplexServer", "DuplexChat", "DuplexPostgres", "Prometheus", "PostgresNIO"},
    # The CLI links no chat server, no PostgreSQL and no Prometheus.
    "duplex": {"DuplexServer", "DuplexChat", "DuplexPostgres", "Prometheus", "PostgresNIO", "X509"},
    # A user's tests compile no PostgreSQL.
    "DuplexTesting": {"DuplexPostgres", "PostgresNIO"},
    "DuplexServer": {"DuplexPostgres", "PostgresNIO"},
    # The PostgreSQL store is a chat store: it needs no server (ChatStoreConfiguration is chat's).
    "DuplexPostgres": {"DuplexServer", "DuplexRecordReplay", "Duplex", "Prometheus"},
}
# What a target must not use itself, by dependency or by `import`, though a target it builds on
# may (the host serves on Hummingbird; chat only speaks of rooms and frames).
own_rules = {
    "DuplexChat": {"Hummingbird", "HummingbirdCore", "HummingbirdWebSocket"},
}
failures = []
for name, forbidden in own_rules.items():
    target = targets[name]
    for bad in sorted(forbidden & set(target.get("product_dependencies", []))):
        failures.append(f"{name} depends on {bad} itself")
    for source in target.get("sources", []):
        path = os.path.join(package.get("path", "."), target["path"], source)
        with open(path, encoding="utf-8") as file:
            for number, line in enumerate(file, 1):
                words = line.split()
                if "import" in words[:3] and words[-1] in forbidden:
                    failures.append(f"{name} imports {words[-1]} ({target['path']}/{source}:{number})")
for name, forbidden in rules.items():
    reached, products = closure(name)
    if name in reached:
        failures.append(f"{name} depends on itself (a cycle)")
    for bad in sorted(forbidden & (reached | products)):
        failures.append(f"{name} reaches {bad}")
if failures:
    print("\n".join(failures))
    sys.exit(1)
for name in rules:
    reached, _ = closure(name)
    print(f"{name}: {', '.join(sorted(reached)) or 'no package target'}")
