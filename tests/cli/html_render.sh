#!/bin/sh
# html_render.sh BUILD_DIR - renders `pagelock report --format html` in
# headless Chromium and checks, from the screenshot's pixels, that the
# timeline is drawn: pageable copies (red) and kernels (purple) must cover
# a meaningful area within the first screen.  Skipped (77) without
# /usr/bin/chromium or python3.
set -u
B=$1
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
[ -x "$CHROMIUM" ] || { echo "$CHROMIUM not installed: skipped"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "python3 not installed: skipped"; exit 77; }
T=$(mktemp -d "${TMPDIR:-/tmp}/pagelock-render.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 1
export PAGELOCK_NO_ADDR2LINE=1
fail() { echo "FAIL [html_render]: $*"; exit 1; }

"$B/pl_mkgputrace" before.trace before || fail "mkgputrace failed"
"$B/pagelock" report --format html -o page.html before.trace || fail "report failed"
# A private profile and HOME: nothing of the user's, nothing left behind.
HOME="$T" timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu \
  --hide-scrollbars --user-data-dir="$T/profile" --screenshot="$T/shot.png" \
  --window-size=1400,1000 "file://$T/page.html" >chromium.log 2>&1
[ -s shot.png ] || { cat chromium.log; fail "no screenshot"; }
# Keep the picture for a person to look at when asked to.
[ -n "${PAGELOCK_KEEP_SCREENSHOT:-}" ] && cp shot.png "$PAGELOCK_KEEP_SCREENSHOT"

# A minimal PNG decoder (zlib only: 8-bit RGB/RGBA, no interlace, the five
# filters), then pixel counts of the two timeline colours.
python3 - shot.png <<'EOF' || fail "the screenshot does not show the timeline"
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat, hdr = 8, b"", None
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if kind == b"IHDR": hdr = struct.unpack(">IIBBBBB", body)
    elif kind == b"IDAT": idat += body
    pos += 12 + n
w, h, depth, ctype, _, _, interlace = hdr
assert depth == 8 and ctype in (2, 6) and interlace == 0, hdr
bpp = 3 if ctype == 2 else 4
raw, stride = zlib.decompress(idat), w * bpp
prev, rows, i = bytearray(stride), [], 0
for _ in range(h):
    f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride]); i += 1 + stride
    for x in range(stride):
        a = line[x - bpp] if x >= bpp else 0
        b = prev[x]; c = prev[x - bpp] if x >= bpp else 0
        if f == 1: line[x] = (line[x] + a) & 255
        elif f == 2: line[x] = (line[x] + b) & 255
        elif f == 3: line[x] = (line[x] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    rows.append(line); prev = line
def count(rgb):
    n = 0
    for line in rows:
        for x in range(0, stride, bpp):
            if all(abs(line[x + k] - rgb[k]) <= 6 for k in range(3)): n += 1
    return n
up, down = count((0xd6, 0x27, 0x28)), count((0xff, 0x7f, 0x0e))
pageable, kernel = up + down, count((0x94, 0x67, 0xbd))
print("pageable upload pixels", up, "download pixels", down, "kernel pixels", kernel)
assert up > 1000 and down > 1000, (up, down)
# The timeline (1100 px wide) has 16 pageable copies filling ~half of two
# 14 px rows and 4 kernels a third of one: thousands of pixels each; the
# legend swatches alone are 144.
assert pageable > 5000, pageable
assert kernel > 2000, kernel
EOF
exit 0
