#!/usr/bin/env python3
"""Write the JavaScript modules embedded in Claude Code's native binary
(a Bun single-file executable) to prefix/cli.js, one after another, so its
code can be cited at file:line (`grep -n` on prefix/cli.js). Deterministic:
the same binary always gives the same file."""
import pathlib, re, sys

here = pathlib.Path(__file__).resolve().parent
exe = here / "prefix/lib/node_modules/@anthropic-ai/claude-code/bin/claude.exe"
data = exe.read_bytes()
out, n = [], 0
for m in re.finditer(rb"// @bun @bytecode\n// \(c\) Anthropic PBC", data):
    end = data.find(b"\x00", m.start())
    out.append(data[m.start():end].decode("utf-8", "replace"))
    n += 1
if n == 0:
    sys.exit("no embedded modules found in " + str(exe))
(here / "prefix/cli.js").write_text("\n".join(out) + "\n")
print(f"prefix/cli.js: {n} modules")
