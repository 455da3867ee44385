#!/usr/bin/env python3
"""Calls our C++ must not make, each with the reason and what to use instead.

std::filesystem::remove_all: the PyTorch wheel's libtorch.so (2.11, the GPU host's) exports its own
copy, which wins symbol resolution in any binary linking it and crashes there (a call through a
null pointer): every image-input test segfaulted on the GPU host until its fixture helper stopped
calling it. Use ditserve::RemoveTree (common/remove_tree.h).

Comments are not code: a line's text after // is ignored.

Usage: check_banned_calls.py [SOURCE_ROOT] [FILE ...]   (exit 0: none; 1: each use printed)
"""
import os
import re
import sys

BANNED = [
    (re.compile(r"\b(?:std::filesystem|fs)::remove_all\s*\("),
     "std::filesystem::remove_all crashes in binaries linking PyTorch 2.11's libtorch.so: "
     "use ditserve::RemoveTree (common/remove_tree.h)"),
]
SKIP_DIRS = {".git", "node_modules", "third_party", ".carry"}


def sources(root):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames
                       if d not in SKIP_DIRS and not d.startswith("build") and not d.startswith(".")]
        for name in filenames:
            if name.endswith((".cc", ".h", ".cu", ".cuh", ".cpp")):
                yield os.path.join(dirpath, name)


def check(path):
    found = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            code = line.split("//", 1)[0]
            for pattern, reason in BANNED:
                if pattern.search(code):
                    found.append(f"{path}:{number}: {reason}")
    return found


def main(argv):
    root = argv[1] if len(argv) > 1 else "."
    files = argv[2:] or list(sources(root))
    found = [f for path in files for f in check(path)]
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
