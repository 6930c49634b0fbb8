#!/usr/bin/env python3
"""Fails when a doc or a code comment cites a repository path that does not exist.

Looks at the comments of Rust, TOML and shell files and at every Markdown file tracked by git,
for words that look like relative file paths: a `/` and a known file extension
(`configs/nat.toml`, `src/run/vnic.rs`), or a bare Markdown file name (`DESIGN.md`). A path
counts as existing relative to the repository root, or to the citing file's folder or any folder
above it (a crate cites `csrc/shim.c` from its own root). URLs, absolute paths and patterns
(`<case>`, `*`, `{worker}`) are not paths of the repository, and neither are the paths in
`docs/reference/`, whose notes cite the source files of other projects (DPDK, rdma-core, the
paper's artifact) as their sources. A Markdown link's relative target (`[DPDK](dpdk.md)`,
`[reference](reference/)`) must exist relative to the linking file. Prints every miss as `file:line: path` and exits 1 if there
is one.
"""
import os
import re
import subprocess
import sys

EXTS = "rs|toml|md|sh|py|pcap|csv|json|svg|png|c|h|yml|yaml|txt"
PATH = re.compile(r"(?<![\w./:-])((?:\.{1,2}/)?[\w.-]+(?:/[\w.-]+)+\.(?:" + EXTS + r")|[\w-]+\.md)(?![\w/])")
COMMENT = {".rs": "//", ".toml": "#", ".sh": "#", ".py": "#"}
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def cited(line):
    for m in PATH.finditer(line):
        p = m.group(1)
        before = line[: m.start()]
        if re.search(r"[a-z]+://\S*$", before) or before.endswith(("/", "~", "$", "{", "<", "*")):
            continue
        yield p


def exists(root, src, p):
    d = os.path.dirname(src)
    while True:
        if os.path.exists(os.path.join(root, d, p)):
            return True
        if not d:
            return False
        d = os.path.dirname(d)


def main():
    root = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True,
                          text=True, check=True).stdout.strip()
    files = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True,
                           check=True).stdout.split()
    misses = []
    for f in files:
        ext = os.path.splitext(f)[1]
        if (ext != ".md" and ext not in COMMENT) or f.startswith("docs/reference/"):
            continue
        try:
            text = open(os.path.join(root, f), encoding="utf-8").read()
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if ext != ".md":
                i = line.find(COMMENT[ext])
                if i < 0:
                    continue
                line = line[i:]
            for p in cited(line):
                if not exists(root, f, p):
                    misses.append(f"{f}:{n}: {p}")
            if ext == ".md":
                for m in LINK.finditer(line):
                    t = m.group(1)
                    if re.match(r"[a-z]+:", t):
                        continue
                    if not os.path.exists(os.path.join(root, os.path.dirname(f), t)):
                        misses.append(f"{f}:{n}: link {t}")
    for m in misses:
        print(m)
    if misses:
        print(f"{len(misses)} cited paths do not exist in the repository", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
