"""Checks pagelock's report of one corpus program (tests/gpu/corpus.sh).

  check.py LABEL SCRIPT REPORT.json REPORT.txt CHECK...

Prints one "PASS LABEL: ..." or "FAIL LABEL: ..." line per CHECK; exits 1
when one failed.  SCRIPT's lines ending in "# SITE:<name>" are the user's
lines the checks name.  CHECK:
  call:NAME[:LIBRE]   some call row (any process) has NAME's line as its
                      innermost user line; with LIBRE, its library line
                      ("<file>:<line> in <function>") matches the regular
                      expression LIBRE.  The text report shows the line
                      (and 'library:' beneath it when LIBRE is given).
  alloc:NAME[:LIBRE]  the same for the allocation-site table.
  copies>=N           the processes' copy calls add up to N or more.
  pageable>=N         their pageable copies add up to N or more.
  procs>=N            N processes or more made copies.
  allocs-known        every pageable byte has an allocation site, but for
                      buffers too small to be tracked (1% of the bytes).
  no-note:RE          no process note matches RE."""
import json
import os
import re
import sys


def main():
    label, script, rjson, rtext = sys.argv[1:5]
    checks = sys.argv[5:]
    marks = {}
    with open(script) as f:
        for no, line in enumerate(f, 1):
            m = re.search(r"# SITE:(\w+)", line)
            if m:
                marks[m.group(1)] = no
    base = os.path.basename(script)
    with open(rjson) as f:
        procs = json.load(f)["processes"]
    with open(rtext) as f:
        text = f.read()
    bad = 0

    def say(ok, what):
        nonlocal bad
        print("%s %s: %s" % ("PASS" if ok else "FAIL", label, what), flush=True)
        bad |= not ok

    def where(py):
        return "%s:%d in %s" % (os.path.basename(py["file"]), py["line"], py["function"])

    def libstr(lib):
        return "%s:%d in %s" % (lib["file"], lib["line"], lib["function"]) if lib else "none"

    for c in checks:
        kind, _, rest = c.partition(":")
        if kind in ("call", "alloc"):
            name, _, libre = rest.partition(":")
            want = marks.get(name)
            table = "call_sites" if kind == "call" else "alloc_sites"
            rows = [r for p in procs for r in p[table]]
            mine = [r for r in rows if r.get("python") and not r["python"]["library"]
                    and os.path.basename(r["python"]["file"]) == base and r["python"]["line"] == want]
            hits = [r for r in mine if not libre or
                    re.search(libre, libstr(r["python"].get("library_line")))]
            shown = ["%s [library: %s] %s" % (where(r["python"]), libstr(r["python"].get("library_line")),
                                              r["site"]) if r.get("python") else r["site"]
                     for r in rows[:8]]
            if not hits:
                say(False, "%s site %s:%s%s: no row (rows: %s)" % (
                    kind, base, want, " with library line /%s/" % libre if libre else "", shown))
                continue
            py = hits[0]["python"]
            label_re = re.escape("%s:%d in %s" % (base, want, py["function"]))
            if libre:
                ok = re.search(label_re + r"\n +library: [^\n]+\n +native: ", text) is not None
            else:
                ok = re.search(label_re + r"\n( +library: [^\n]+\n)? +native: ", text) is not None
            say(ok, "%s site %s, library line %s, native %s%s" % (
                kind, where(py), libstr(py.get("library_line")), hits[0]["site"],
                "" if ok else " (but the text report does not show it so)"))
        elif kind.startswith(("copies>=", "pageable>=", "procs>=")):
            what, n = c.split(">=")
            n = int(n)
            if what == "copies":
                got = sum(p["totals"]["copies"] for p in procs)
            elif what == "pageable":
                got = sum(p["totals"]["pageable"]["copies"] for p in procs)
            else:
                got = sum(1 for p in procs if p["totals"]["copies"] > 0)
            say(got >= n, "%s %d (want %d or more)" % (what, got, n))
        elif kind == "allocs-known":
            # Buffers under PAGELOCK_TRACK_MIN (64 KiB) are not tracked and
            # have no site: the copies without one must be that small (a
            # Lightning fit's 43 copies of 2 KiB tensors, 1.1% of its bytes).
            for p in procs:
                pageable = p["totals"]["pageable"]["bytes"]
                if not pageable:
                    continue
                rows = [r for r in p["alloc_sites"] if r["address"] not in ("0x0", "0")]
                known = sum(r["bytes"] for r in rows)
                unsited = p["totals"]["pageable"]["copies"] - sum(r["copies"] for r in rows)
                say(pageable - known < max(unsited, 0) * 65536 or known == pageable,
                    "pid %s: %d of %d pageable bytes have an allocation site (%d of %d copies)"
                    % (p["pid"], known, pageable, sum(r["copies"] for r in rows),
                       p["totals"]["pageable"]["copies"]))
        elif kind == "no-note":
            hits = [n["text"] for p in procs for n in p["notes"] if re.search(rest, n["text"])]
            say(not hits, "no note /%s/%s" % (rest, ": " + hits[0][:160] if hits else ""))
        else:
            say(False, "unknown check %s" % c)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
