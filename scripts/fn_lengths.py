#!/usr/bin/env python3
"""The longest functions under src/, outside tests.

    python3 scripts/fn_lengths.py               # the 30 longest
    python3 scripts/fn_lengths.py --top 100
    python3 scripts/fn_lengths.py --max 100 [--allow src/runner/ ...] [PATH...]

A function's length is its lines from the `fn` keyword to its closing brace
(nested functions and closures included). Test code is left out: a module or
item under `#[cfg(test)]`, and `#[test]` functions. With `--max N`, print
every function longer than N lines whose file is not under an `--allow`
prefix, and exit 1 if there is one (tests/structure.rs runs this).

A small lexer, not a parser: comments, strings (raw, byte), char literals and
lifetimes are skipped, braces counted. Good enough for rustfmt-formatted code.
"""

import argparse
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def tokens(src):
    """(kind, text, line) for the tokens that matter: identifiers, `{`, `}`,
    `(`, `)`, `[`, `]`, `;`, `#`, `!`; comments and literals skipped."""
    i, line, n = 0, 1, len(src)
    while i < n:
        c = src[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif src.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if src.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif src.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    line += src[i] == "\n"
                    i += 1
        elif re.match(r"b?r#*\"", src[i:i + 40]):
            m = re.match(r"b?r(#*)\"", src[i:])
            end = '"' + m.group(1)
            j = src.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            line += src.count("\n", i, j)
            i = j
        elif c == '"' or src.startswith('b"', i):
            i += 1 if c == '"' else 2
            while i < n and src[i] != '"':
                if src[i] == "\\":
                    i += 1
                line += src[i] == "\n"
                i += 1
            i += 1
        elif c == "'" or src.startswith("b'", i):
            k = i + (1 if c == "'" else 2)
            m = re.match(r"(\\.[^']*|[^\\'])'", src[k:k + 12])
            if m:  # a char literal
                i = k + m.end()
            else:  # a lifetime or label
                i = k
        elif IDENT.match(c):
            m = IDENT.match(src, i)
            yield ("id", m.group(0), line)
            i = m.end()
        elif c in "{}()[];#!":
            yield (c, c, line)
            i += 1
        else:
            i += 1


def functions(src):
    """(name, first line, last line, is_test) for every fn with a body."""
    toks = list(tokens(src))
    out = []
    # Brace depths at which test code ends (a `#[cfg(test)]` item's body).
    test_until = []
    pending_test = False
    depth = 0
    open_fns = []  # (name, line, depth of its body, is_test)
    i = 0
    while i < len(toks):
        kind, text, line = toks[i]
        if kind == "#":
            # An attribute: `#[...]` or `#![...]`; read it whole.
            j = i + 1
            if j < len(toks) and toks[j][0] == "!":
                j += 1
            if j < len(toks) and toks[j][0] == "[":
                d, k, words = 0, j, []
                while k < len(toks):
                    if toks[k][0] == "[":
                        d += 1
                    elif toks[k][0] == "]":
                        d -= 1
                        if d == 0:
                            break
                    elif toks[k][0] == "id":
                        words.append(toks[k][1])
                    k += 1
                if words[:1] == ["test"] or (words[:1] == ["cfg"] and "test" in words
                                             and "not" not in words):
                    pending_test = True
                i = k + 1
                continue
        if kind == "id" and text == "fn" and i + 1 < len(toks) and toks[i + 1][0] == "id":
            name = toks[i + 1][1]
            # Find its body: the first `{` at paren depth 0, unless a `;` comes first.
            j, paren = i + 2, 0
            while j < len(toks):
                k = toks[j][0]
                if k in "([":
                    paren += 1
                elif k in ")]":
                    paren -= 1
                elif k == ";" and paren == 0:
                    break
                elif k == "{" and paren == 0:
                    break
                j += 1
            if j < len(toks) and toks[j][0] == "{":
                in_test = pending_test or bool(test_until)
                open_fns.append((name, line, depth + 1, in_test))
                depth += 1
                if pending_test:
                    test_until.append(depth)
                pending_test = False
                i = j + 1
                continue
            pending_test = False
            i = j + 1
            continue
        if kind == "{":
            depth += 1
            if pending_test:
                test_until.append(depth)
                pending_test = False
        elif kind == "}":
            if open_fns and open_fns[-1][2] == depth:
                name, first, _, is_test = open_fns.pop()
                out.append((name, first, line, is_test))
            if test_until and test_until[-1] == depth:
                test_until.pop()
            depth -= 1
        elif kind == ";":
            # The end of an item an attribute applied to (`#[cfg(test)] use ...;`).
            pending_test = False
        i += 1
    return out


TEST_MOD = re.compile(r"#\[cfg\(test\)\]\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+(\w+)\s*;")


def test_module_files(path, src):
    """The files of the modules `path` declares under `#[cfg(test)]`."""
    base = os.path.dirname(path)
    stem = os.path.basename(path)[:-3]
    if stem not in ("mod", "lib", "main"):
        base = os.path.join(base, stem)
    out = set()
    for name in TEST_MOD.findall(src):
        out.add(os.path.join(base, name + ".rs"))
        out.add(os.path.join(base, name, "mod.rs"))
    return out


def scan(paths):
    """(length, path, line, name) for every non-test fn in the .rs files under paths."""
    found = []
    files = []
    for root in paths:
        files += [root] if root.endswith(".rs") else [
            os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".rs")]
    test_files = set()
    for path in files:
        with open(path, encoding="utf-8") as f:
            test_files |= test_module_files(path, f.read())
    for path in sorted(files):
        rel = os.path.relpath(path, REPO)
        if path in test_files or "/tests/" in rel or "/snapshots/" in rel:
            continue
        with open(path, encoding="utf-8") as f:
            src = f.read()
        for name, first, last, is_test in functions(src):
            if not is_test:
                found.append((last - first + 1, rel, first, name))
    return sorted(found, reverse=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", default=[os.path.join(REPO, "src")])
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--max", type=int, help="fail on any function longer than this")
    ap.add_argument("--allow", action="append", default=[],
                    help="a path prefix (src/runner/) whose functions --max ignores")
    a = ap.parse_args()
    found = scan(a.paths)
    if a.max is None:
        for length, rel, line, name in found[:a.top]:
            print(f"{length:5}  {rel}:{line}  {name}")
        return 0
    over = [f for f in found if f[0] > a.max and not any(f[1].startswith(p) for p in a.allow)]
    for length, rel, line, name in over:
        print(f"{length:5}  {rel}:{line}  {name}  (over {a.max})")
    allowed = [f for f in found if f[0] > a.max and f not in over]
    for length, rel, line, name in allowed:
        print(f"{length:5}  {rel}:{line}  {name}  (allowed for now)")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
