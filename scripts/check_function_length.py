#!/usr/bin/env python3
"""Lists the production C++ functions longer than a limit (HACKING.md: 80 lines), exit 1 if any.

Usage: scripts/check_function_length.py [--limit 80] [--root DIR] [--all]

A function's length is the lines from its opening brace to its closing one. The production tree is
every .cc/.h/.cu under the folders of PRODUCTION (not tests/, bench/, generated code). The scan is
lexical, no compiler: comments, string and character literals (raw strings too) are blanked, then
braces are matched; a brace opens a function body when the text before it (since the last ';', '{'
or '}') ends in a parameter list and its qualifiers, at namespace or class level, and is not a
control statement. Braces inside a body (lambdas, blocks) belong to that body. A constructor's
brace-initialised members (`: a_{1} {`) are part of its header. --all prints every function with
its length (longest first) instead of only those over the limit.
"""
import argparse
import os
import re
import sys

PRODUCTION = ["cli", "comm", "common", "imaging", "metrics", "models", "pipeline", "server",
              "sharding", "tools", "worker"]
EXTENSIONS = (".cc", ".h", ".cu", ".cuh")
CONTROL = re.compile(r"^\s*(if|for|while|switch|catch|do|else|try)\b")
# The end of a function header: ')' then qualifiers, a trailing return type or nothing.
FUNCTION_HEADER = re.compile(
    r"\)\s*(const\b|noexcept\b(\s*\([^)]*\))?|override\b|final\b|mutable\b|&&?|->\s*[\w:<>,\s*&]+"
    r"|\s)*$")


def blank_literals(text):
    """Comments, string and char literals replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not text[i - 1].isalnum()):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = ")" + m.group(1) + '"'
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * max(0, j - i - 2) + (c if j - i >= 2 else ""))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(path):
    """(first line, lines, name) of each function body in the file."""
    text = blank_literals(open(path, encoding="utf-8", errors="replace").read())
    text = re.sub(r"^[ \t]*#.*$", "", text, flags=re.M)  # preprocessor lines
    found = []
    stack = []  # (kind, start offset, name)
    header_start = 0
    for i, c in enumerate(text):
        if c == ";" and (not stack or stack[-1][0] in ("ns", "class")):
            header_start = i + 1
        elif c == "{":
            header = text[header_start:i]
            top = stack[-1][0] if stack else "ns"
            if top in ("func", "block"):
                stack.append(("block", i, ""))
                continue
            h = " ".join(header.split())
            if re.search(r"\bnamespace\b", h) or h.startswith('extern "C"'):
                kind = "ns"
            elif re.search(r"\b(class|struct|union|enum)\b[^()]*$", h):
                kind = "class"
            elif re.search(r"[\w>\]]\s*$", h) and ")" in h and re.search(r"\)\s*:\s", h):
                kind = "init"  # a member's brace initialiser in a constructor's init list
            elif ")" in h and FUNCTION_HEADER.search(re.sub(r"\)\s*:\s.*$", ")", h)) and \
                    not CONTROL.match(h) and "=" not in h.split("(")[0]:
                kind = "func"  # (a constructor's init list dropped before the test)
            else:
                kind = "block"
            name = ""
            if kind == "func":
                m = re.search(r"([~\w:<>]+)\s*\(", h)
                name = m.group(1) if m else h[:40]
            stack.append((kind, i, name))
            if kind != "init":
                header_start = i + 1
        elif c == "}":
            if not stack:
                continue
            kind, start, name = stack.pop()
            if kind == "func":
                first = text.count("\n", 0, start) + 1
                last = text.count("\n", 0, i) + 1
                found.append((first, last - first + 1, name))
            if kind != "init" and (not stack or stack[-1][0] in ("ns", "class")):
                header_start = i + 1
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=int, default=80)
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."))
    ap.add_argument("--all", action="store_true")
    a = ap.parse_args()
    rows = []
    for top in PRODUCTION:
        for d, _, files in os.walk(os.path.join(a.root, top)):
            for f in sorted(files):
                if f.endswith(EXTENSIONS) and ".pb." not in f:
                    p = os.path.join(d, f)
                    rel = os.path.relpath(p, a.root)
                    rows += [(n, rel, line, name) for line, n, name in functions(p)]
    rows.sort(reverse=True)
    over = [r for r in rows if r[0] > a.limit]
    for n, rel, line, name in (rows if a.all else over):
        print(f"{n:5d} {rel}:{line} {name}")
    print(f"{len(rows)} functions, {len(over)} over {a.limit} lines"
          + (f"; the longest {rows[0][0]}" if rows else ""), file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
