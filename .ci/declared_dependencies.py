#!/usr/bin/env python3
"""Reads `swift package dump-package` on stdin and fails when the root package declares a
dependency that none of its targets uses: a dependency only the benchmarks (Benchmarks/Package.swift)
or nothing at all needs would otherwise be resolved by every package that depends on Duplex.
The swift-docc-plugin is the exception: a plugin is used by `swift package`, not by a target."""
import json
import sys

package = json.load(sys.stdin)
declared = set()
for dependency in package["dependencies"]:
    for kind in dependency.values():
        declared.add(kind[0]["identity"].lower())
used = set()
for target in package["targets"]:
    for dependency in target["dependencies"]:
        if "product" in dependency:
            used.add(dependency["product"][1].lower())
unused = sorted(declared - used - {"swift-docc-plugin"})
if unused:
    print("Package.swift declares dependencies no target uses: " + ", ".join(unused))
    print("(a dependency only the benchmarks need goes in Benchmarks/Package.swift)")
    sys.exit(1)
print(f"Package.swift: each of its {len(declared)} dependencies is used by a target")
