"""Checks pagelock's report of tests/python/pysites.py (or another script
with the same "# SITE:<name>" markers): every marked line is named, as
file:line and function, by the site table the marker's name says.

  check_pysites.py SCRIPT[,SCRIPT...] REPORT.json REPORT.txt SPEC...

Markers are read from every SCRIPT; names are unique across them.  SPEC:
  KIND:NAME:FUNCTION[:OUTER,...]  KIND call or alloc: some row of that
      table has the marked line of NAME as its innermost Python (user)
      frame, in FUNCTION (or *.FUNCTION), and (when given) the lines marked OUTER... as
      the next frames out, in order; OUTER END: no further frame.  The
      text report names the line with 'native:' beneath (a 'library:'
      line may come between).
  calllib:FILE:FUNC  some call row has only library frames (installed
      packages', the standard library's), the innermost in file FILE,
      function FUNC (or *.FUNC).
  lib:KIND:NAME:LIBMARK:LIBFUNC  some row of KIND whose user line is
      NAME's has, as the library line that made the call, the line
      marked "# LIBSITE:LIBMARK" in the file that library line names
      (read from disk), in function LIBFUNC (or *.LIBFUNC); the text
      report shows it as 'library: <package path>:<line> in ...' between
      the user line and 'native:'.
  nolib:KIND:NAME  every row of KIND whose user line is NAME's has no
      library line."""
import json
import os
import re
import sys


def marks_of(path, tag):
    found = {}
    with open(path) as f:
        for no, line in enumerate(f, 1):
            m = re.search(r"# %s:(\w+)" % tag, line)
            if m:
                found[m.group(1)] = no
    return found


def fmt(py):
    return "%s:%d in %s" % (os.path.basename(py["file"]), py["line"], py["function"])


def main():
    scripts, rjson, rtext = sys.argv[1].split(","), sys.argv[2], sys.argv[3]
    specs = sys.argv[4:]
    marks = {}  # name -> (basename, line)
    for script in scripts:
        for name, no in marks_of(script, "SITE").items():
            marks[name] = (os.path.basename(script), no)
    with open(rjson) as f:
        rep = json.load(f)
    with open(rtext) as f:
        text = f.read()
    procs = rep["processes"]
    bad = []

    def rows_of(kind):
        table = "call_sites" if kind == "call" else "alloc_sites"
        return [r for p in procs for r in p[table] if r.get("python")]

    def user_rows(kind, name):
        base, want = marks[name]
        return [r for r in rows_of(kind)
                if os.path.basename(r["python"]["file"]) == base and r["python"]["line"] == want
                and not r["python"]["library"]]

    for spec in specs:
        part = spec.split(":")
        if part[0] == "calllib":
            _, fname, func = part
            ok = any(r["python"]["library"] and os.path.basename(r["python"]["file"]) == fname
                     and r["python"]["function"].split(".")[-1] == func
                     for r in rows_of("call"))
            if not ok:
                bad.append("%s: no call row with library frames only in %s, %s" % (spec, fname, func))
            continue
        if part[0] == "nolib":
            _, kind, name = part
            rows = user_rows(kind, name)
            if not rows:
                bad.append("%s: no %s row names the line of %s" % (spec, kind, name))
            for r in rows:
                if r["python"].get("library_line"):
                    bad.append("%s: a library line where none belongs: %s" % (spec, r["python"]["library_line"]))
            continue
        if part[0] == "lib":
            _, kind, name, libmark, libfunc = part
            rows = user_rows(kind, name)
            hit = None
            for r in rows:
                lib = r["python"].get("library_line")
                if not lib or lib["function"].split(".")[-1] != libfunc or not os.path.exists(lib["file"]):
                    continue
                if marks_of(lib["file"], "LIBSITE").get(libmark) == lib["line"]:
                    hit = r
                    break
            if hit is None:
                seen = [(fmt(r["python"]), r["python"].get("library_line")) for r in rows]
                bad.append("%s: no %s row of %s:%d has the library line %s in %s (rows: %s)"
                           % (spec, kind, marks[name][0], marks[name][1], libmark, libfunc, seen))
                continue
            py, lib = hit["python"], hit["python"]["library_line"]
            label = fmt(py)
            # The line may head several rows (one per library line).
            if not any(lib["file"].endswith("/" + m.group(1)) and int(m.group(2)) == lib["line"]
                       for m in re.finditer(re.escape(label) + r"\n +library: (\S+):(\d+) in (\S+)\n +native: \S", text)):
                bad.append("%s: the text report lacks '%s' with 'library: ...%s:%d' and 'native:' beneath"
                           % (spec, label, os.path.basename(lib["file"]), lib["line"]))
            continue
        kind, name, func, *outer = part
        outer = outer[0].split(",") if outer else []
        base, want = marks[name]
        rows = rows_of(kind)
        hit = None
        for r in rows:
            py = r["python"]
            # FUNCTION or, as 3.11+ qualify it, *.FUNCTION.
            fn = py["function"]
            if os.path.basename(py["file"]) == base and py["line"] == want and (
                    fn == func or fn.endswith("." + func)):
                hit = r
                break
        if hit is None:
            seen = [fmt(r["python"]) for r in rows]
            bad.append("%s: no %s row names %s:%d in %s (rows: %s)" % (spec, kind, base, want, func, seen))
            continue
        frames = hit["python"]["frames"]
        for i, o in enumerate(outer, 1):
            if o == "END":
                if len(frames) != i:
                    bad.append("%s: %d frames, want %d: %s" % (spec, len(frames), i, frames))
                break
            if i >= len(frames) or frames[i]["line"] != marks[o][1]:
                bad.append("%s: frame %d is not line %d (%s): %s" % (spec, i, marks[o][1], o, frames))
                break
        # The text report names the line, the native site beneath (the
        # library line between, when a library made the call).
        label = "%s:%d in %s" % (base, want, hit["python"]["function"])
        m = re.search(re.escape(label) + r"\n( +library: [^\n]+\n)? +native: \S", text)
        if not m:
            bad.append("%s: the text report lacks '%s' with 'native:' beneath" % (spec, label))
    for b in bad:
        print("FAIL:", b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
