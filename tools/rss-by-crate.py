#!/usr/bin/env python3
"""Which code of a running kube-anchor is resident: rss-by-crate.py PID [TOP]

Reads /proc/PID/maps and /proc/PID/pagemap (root needed) for the pages of the process's own
executable that are mapped in, and attributes each resident page to the crate owning most of its
bytes (symbols from `nm -C --print-size`; code inlined by LTO counts for its caller). Prints KiB
per crate, then the anonymous and other file-backed memory from /proc/PID/smaps_rollup.
"""
import collections
import os
import re
import struct
import subprocess
import sys

PAGE = os.sysconf("SC_PAGE_SIZE")


def crate_of(name):
    # `<T as path::Trait>::f`, `path::f`, `_$LT$...` — the first path segment that names a crate.
    name = name.lstrip("<&*").replace("dyn ", "").replace("mut ", "")
    m = re.match(r"([A-Za-z_][A-Za-z0-9_]*)::", name)
    return m.group(1) if m else "(other: " + (name.split("(")[0][:20] or "?") + ")"


def main():
    pid = int(sys.argv[1])
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    exe = os.readlink(f"/proc/{pid}/exe")
    maps = []
    for line in open(f"/proc/{pid}/maps"):
        parts = line.split()
        if len(parts) >= 6 and parts[5] == exe:
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            maps.append((lo, hi, int(parts[2], 16), parts[1]))
    # Load bias of a PIE: where its file offset 0 (virtual address 0) is mapped.
    bias = next(lo for lo, _, off, _ in maps if off == 0)
    syms = []
    out = subprocess.run(["nm", "-C", "--defined-only", "--print-size", "--numeric-sort", exe],
                         capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        parts = line.split(" ", 3)
        if len(parts) == 4 and parts[2] in "tTwW":
            syms.append((int(parts[0], 16), int(parts[1], 16), parts[3]))
    # Page (file-relative) -> bytes per crate, from every symbol's extent.
    page_owners = collections.defaultdict(collections.Counter)
    for s, size, name in syms:
        crate = crate_of(name)
        for page in range(s // PAGE, (s + max(size, 1) - 1) // PAGE + 1):
            lo_b, hi_b = max(s, page * PAGE), min(s + size, (page + 1) * PAGE)
            page_owners[page][crate] += max(hi_b - lo_b, 0)
    by_crate = collections.Counter()
    resident = collections.Counter()
    with open(f"/proc/{pid}/pagemap", "rb") as pagemap:
        for lo, hi, _, perms in maps:
            for addr in range(lo, hi, PAGE):
                pagemap.seek(addr // PAGE * 8)
                (entry,) = struct.unpack("<Q", pagemap.read(8))
                if not entry >> 63 & 1:
                    continue
                resident[perms] += PAGE
                if "x" not in perms:
                    continue
                owners = page_owners.get((addr - bias) // PAGE)
                by_crate[owners.most_common(1)[0][0] if owners else "(no symbol)"] += PAGE
    print(f"resident pages of {exe}:")
    for perms, n in sorted(resident.items()):
        print(f"  {perms}: {n // 1024} KiB")
    print("executable pages by crate (KiB):")
    for crate, n in by_crate.most_common(top):
        print(f"  {n // 1024:6d}  {crate}")
    print(open(f"/proc/{pid}/smaps_rollup").read())


if __name__ == "__main__":
    main()
