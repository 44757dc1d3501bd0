#!/usr/bin/env python3
"""Medians and per-round ratios to llama.cpp from bench/forward_rounds.sh's output."""
import re
import statistics as st
import sys


def main() -> int:
    rows = {}
    for line in open(sys.argv[1]):
        m = re.match(r"r(\d+) (\S+) llama.cpp round \d+: prompt ([\d.]+) tok/s, decode ([\d.]+)", line)
        if m:
            rows.setdefault((m[2], "llama.cpp"), []).append((int(m[1]), float(m[3]), float(m[4])))
            continue
        m = re.match(r"r(\d+) (\S+) (\w+) prompt ([\d.]+) decode ([\d.]+)", line)
        if m:
            rows.setdefault((m[2], m[3]), []).append((int(m[1]), float(m[4]), float(m[5])))
    for model in sorted({k[0] for k in rows}):
        if (model, "llama.cpp") not in rows:
            print(model, "llama.cpp: no successful run (see its FAILED lines); no ratios")
            continue
        ref = {r: (p, d) for r, p, d in rows[(model, "llama.cpp")]}
        print(model, "llama.cpp prompt", st.median(v[0] for v in ref.values()),
              "decode", st.median(v[1] for v in ref.values()))
        for engine in ("fp32", "int8", "bf16"):
            v = rows.get((model, engine), [])
            if not v:
                continue
            v = [x for x in v if x[0] in ref]  # rounds where the peer ran
            pr = [p / ref[r][0] for r, p, _ in v]
            dr = [d / ref[r][1] for r, _, d in v]
            print(f"  {engine}: prompt {st.median(p for _, p, _ in v):.0f} ({st.median(pr):.2f}x; rounds "
                  f"{', '.join(f'{x:.2f}' for x in pr)})  decode {st.median(d for _, _, d in v):.1f} "
                  f"({st.median(dr):.2f}x; rounds {', '.join(f'{x:.2f}' for x in dr)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
