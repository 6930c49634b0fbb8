#!/usr/bin/env python3
"""Fails when two source files of a crate use each other, directly or around a circle.

A file uses another when it names an item (`crate::x::Y`, `super::Y`, `use ...`) that the other
file defines; `pub use` re-exports are followed to the file that defines the item, so a parent
module that only declares and re-exports its children is no part of a circle. Test modules
(`#[cfg(test)] mod ...`) are left out. Prints each circle with its edges and exits 1 if there is
one. This reads the source text, not the compiler's resolution: it is a check of the house's
layering, not a proof.
"""
import os, re, sys, itertools
root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
crates = {}  # crate name -> src dir
for d, name in [('wire','wire'),('nicmem','nicmem'),('dataplane','dataplane'),('nfs','nfs'),('pktgen','pktgen'),('.','nmdp'),('dataplane/dpdk-sys','dpdk_sys')]:
    crates[name] = os.path.join(root, d, 'src')

def strip(text):
    tok = re.compile(r'//[^\n]*|/\*.*?\*/|r#*"|"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])\'', re.S)
    out = []; i = 0
    while True:
        m = tok.search(text, i)
        if not m:
            out.append(text[i:]); break
        out.append(text[i:m.start()])
        g = m.group(0)
        if g.startswith('r'):
            hashes = g[1:-1]
            end = text.find('"' + hashes, m.end())
            out.append('""'); i = (end + 1 + len(hashes)) if end >= 0 else len(text)
            continue
        if g.startswith('"'): out.append('""')
        elif g.startswith("'"): out.append("' '")
        i = m.end()
    return ''.join(out)

def modfiles(src):
    """map module path tuple -> file"""
    out = {}
    def walk(path, f):
        out[path] = f
        text = strip(open(f).read())
        base = os.path.dirname(f) if os.path.basename(f) in ('lib.rs','mod.rs','main.rs') else f[:-3]
        for m in re.finditer(r'(?:#\[path\s*=\s*""\]\s*)?(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;', text):
            n = m.group(1)
            for c in (os.path.join(base, n + '.rs'), os.path.join(base, n, 'mod.rs')):
                if os.path.exists(c):
                    walk(path + (n,), c); break
    walk((), os.path.join(src, 'lib.rs'))
    return out

def use_paths(text):
    """yield segment lists of paths used"""
    paths = []
    for m in re.finditer(r'\buse\s+([^;]+);', text):
        paths += expand(m.group(1).replace('\n',' '))
    for m in re.finditer(r'\b((?:crate|super|self)(?:::\w+)+)', text):
        paths.append(m.group(1).split('::'))
    return paths

def expand(tree):
    tree = tree.strip()
    # split prefix::{...}
    depth = 0
    i = tree.find('{')
    if i < 0:
        p = tree.split(' as ')[0].strip()
        return [[s for s in p.split('::') if s]]
    prefix = tree[:i].rstrip(':').strip()
    inner = tree[i+1:tree.rfind('}')]
    parts, cur, depth = [], '', 0
    for ch in inner:
        if ch == '{': depth += 1
        if ch == '}': depth -= 1
        if ch == ',' and depth == 0:
            parts.append(cur); cur = ''
        else: cur += ch
    parts.append(cur)
    out = []
    for p in parts:
        if not p.strip(): continue
        for sub in expand(p):
            out.append([s for s in prefix.split('::') if s] + sub)
    return out

edges = {}
for cname, src in crates.items():
    if not os.path.exists(os.path.join(src,'lib.rs')): continue
    mods = modfiles(src)
    files = {f: p for p, f in mods.items()}
    # re-exports: module path -> {name: target path}
    reexp = {}
    for p, f in mods.items():
        t = strip(open(f).read())
        for m in re.finditer(r'\bpub\s+use\s+([^;]+);', t):
            for seg in expand(m.group(1).replace('\n',' ')):
                reexp.setdefault(p, {})[seg[-1]] = seg
    def resolve(cur, seg):
        if not seg: return None
        if seg[0] == 'crate': base = (); seg = seg[1:]
        elif seg[0] == 'super':
            base = cur
            while seg and seg[0] == 'super': base = base[:-1]; seg = seg[1:]
        elif seg[0] == 'self': base = cur; seg = seg[1:]
        else:
            return None
        for _ in range(5):
            p = base
            best = base
            rest = list(seg)
            while rest and p + (rest[0],) in mods:
                p = p + (rest.pop(0),); best = p
            # follow re-export of the next name in best
            if rest and best in reexp and rest[0] in reexp[best]:
                tgt = reexp[best][rest[0]]
                # resolve target relative to best
                if tgt[0] in ('crate','super','self'):
                    r = resolve(best, tgt + rest[1:]) ; return r
                elif tgt[0] in mods_first(best):
                    return resolve(best, ['self'] + tgt + rest[1:])
                return best
            return best
        return base
    def mods_first(p):
        return {k[len(p)] for k in mods if len(k) > len(p) and k[:len(p)] == p}
    for p, f in mods.items():
        t = strip(open(f).read())
        # drop #[cfg(test)] mod tests { ... } blocks (approx: from 'mod tests {' to end)
        k = re.search(r'#\[cfg\(test\)\]\s*mod\s+\w+\s*\{', t)
        if k: t = t[:k.start()]
        for seg in use_paths(t):
            if seg and seg[-1] == '*' and seg[0] == 'super':
                continue  # glob of the enclosing module (inline `mod x { use super::*; }`)
            # bare use of child module items `use foo::X` where foo is a child
            if seg and seg[0] not in ('crate','super','self') and p + (seg[0],) in mods:
                seg = ['self'] + seg
            r = resolve(p, seg)
            if r is None: continue
            g = mods[r]
            if g != f and not (len(r) < len(p) and p[:len(r)] == r and False):
                edges.setdefault(f, set()).add(g)
# find 2-cycles and larger SCCs
import collections
idx = {}; low = {}; st = []; on = set(); sccs = []; c = [0]
sys.setrecursionlimit(10000)
def sc(v):
    idx[v] = low[v] = c[0]; c[0] += 1; st.append(v); on.add(v)
    for w in edges.get(v, ()):
        if w not in idx: sc(w); low[v] = min(low[v], low[w])
        elif w in on: low[v] = min(low[v], idx[w])
    if low[v] == idx[v]:
        comp = []
        while True:
            w = st.pop(); on.discard(w); comp.append(w)
            if w == v: break
        if len(comp) > 1: sccs.append(comp)
for v in list(edges):
    if v not in idx: sc(v)
for s in sccs:
    print('CYCLE:', ' '.join(sorted(os.path.relpath(x, root) for x in s)))
    for a in s:
        for b in edges.get(a, ()):
            if b in s: print('   ', os.path.relpath(a, root), '->', os.path.relpath(b, root))
print(len(sccs), 'file circles')
if sccs:
    sys.exit(1)
