#!/usr/bin/env python3
"""Prints the N slowest tests of a ctest JUnit file (ctest --output-junit), for scripts/test.sh.

Usage: slowest_tests.py JUNIT_XML [N]
"""
import sys
import xml.etree.ElementTree as ET


def main() -> int:
    path = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    cases = [(float(c.get("time", "0")), c.get("name", "?")) for c in ET.parse(path).getroot().iter("testcase")]
    cases.sort(reverse=True)
    total = sum(t for t, _ in cases)
    print(f"test: {len(cases)} tests, {total:.0f} s of test time; the {min(n, len(cases))} slowest:")
    for t, name in cases[:n]:
        print(f"  {t:8.1f} s  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
