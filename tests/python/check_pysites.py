"""Checks pagelock's report of tests/python/pysites.py (or a GPU script
with the same "# SITE:<name>" markers): every marked line is named, as
file:line and function, by the site table the marker's name says.

  check_pysites.py SCRIPT REPORT.json REPORT.txt SPEC...

SPEC is KIND:NAME:FUNCTION[:OUTER,...] with KIND call or alloc: some row
of that table must have the marked line of NAME as its innermost Python
frame, in FUNCTION, and (when given) the lines marked OUTER... as the next
frames out, in order; OUTER END: no further frame.  Or calllib:FILE:FUNC:
some call row has only library frames (the frameworks', the standard
library's), the innermost in file FILE, function FUNC (or *.FUNC)."""
import json
import os
import re
import sys


def main():
    script, rjson, rtext = sys.argv[1:4]
    specs = sys.argv[4:]
    marks = {}
    with open(script) as f:
        for no, line in enumerate(f, 1):
            m = re.search(r"# SITE:(\w+)", line)
            if m:
                marks[m.group(1)] = no
    with open(rjson) as f:
        rep = json.load(f)
    with open(rtext) as f:
        text = f.read()
    base = os.path.basename(script)
    procs = rep["processes"]
    bad = []
    for spec in specs:
        if spec.startswith("calllib:"):
            _, fname, func = spec.split(":")
            ok = any(r["python"]["library"] and os.path.basename(r["python"]["file"]) == fname
                     and r["python"]["function"].split(".")[-1] == func
                     for p in procs for r in p["call_sites"] if r.get("python"))
            if not ok:
                bad.append("%s: no call row with library frames only in %s, %s" % (spec, fname, func))
            continue
        kind, name, func, *outer = spec.split(":")
        outer = outer[0].split(",") if outer else []
        table = "call_sites" if kind == "call" else "alloc_sites"
        want = marks[name]
        rows = [r for p in procs for r in p[table] if r.get("python")]
        hit = None
        for r in rows:
            py = r["python"]
            if os.path.basename(py["file"]) == base and py["line"] == want and py["function"] == func:
                hit = r
                break
        if hit is None:
            seen = ["%s:%d in %s" % (os.path.basename(r["python"]["file"]), r["python"]["line"],
                                     r["python"]["function"]) for r in rows]
            bad.append("%s: no %s row names %s:%d in %s (rows: %s)" % (spec, table, base, want, func, seen))
            continue
        frames = hit["python"]["frames"]
        for i, o in enumerate(outer, 1):
            if o == "END":
                if len(frames) != i:
                    bad.append("%s: %d frames, want %d: %s" % (spec, len(frames), i, frames))
                break
            if i >= len(frames) or frames[i]["line"] != marks[o]:
                bad.append("%s: frame %d is not line %d (%s): %s" % (spec, i, marks[o], o, frames))
                break
        # The text report names the line, the native site on the next line.
        label = "%s:%d in %s" % (base, want, func)
        m = re.search(re.escape(label) + r"\n +native: \S", text)
        if not m:
            bad.append("%s: the text report lacks '%s' with 'native:' beneath" % (spec, label))
    for b in bad:
        print("FAIL:", b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
