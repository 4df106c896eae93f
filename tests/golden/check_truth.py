#!/usr/bin/env python3
"""check_truth.py PAGELOCK TRACE... - the report's verdicts against the trace.

Reads each trace's records itself (LINK, COPY, GPU) to know which GPU
copies are pagelock's staged chunks (their correlation is named by a LINK)
and which are the program's, then checks the JSON and text reports:

- chunks are never program copies: join.chunks is the number of GPU copies
  a LINK names (for calls whose COPY was read), the GPU copies that matched
  no call are exactly those no COPY and no LINK names, pinned_async_copies
  counts only the program's pinned async copies, calls never exceed the
  copies;
- a verdict's time is the time of the copies it names: same-stream cites
  same_stream_exposed_ns and "N of M" with the program's counts; made-sync
  cites made_sync_host_ns and the pageable exposed time;
- every "above" in the text names a line that is printed above it.
Exit 0 when all hold, 1 with one line per failure."""
import json
import os
import re
import struct
import subprocess
import sys

GPU_ASYNC = 1
HTOD, DTOH = 1, 2
PINNED = 2


def records(path):
    d = open(path, 'rb').read()
    off = 64
    while off + 8 <= len(d):
        t, s = struct.unpack_from('<II', d, off)
        if s < 8 or off + s > len(d):
            return
        yield t, d[off:off + s]
        off += s


def truth(path):
    links, copy_corrs, copy_seqs, ops = set(), set(), set(), []
    link_seq = {}
    for t, r in records(path):
        if t == 11:
            c, _, seq = struct.unpack_from('<IIQ', r, 8)
            links.add(c)
            link_seq[c] = seq
        elif t == 2:
            seq = struct.unpack_from('<Q', r, 56)[0]
            fl = struct.unpack_from('<I', r, 76)[0]
            copy_seqs.add(seq)
            if len(r) >= 100 and not fl & (1 << 7):
                gc = struct.unpack_from('<I', r, 96)[0]
                if gc:
                    copy_corrs.add(gc)
        elif t == 9 and r[56] in (1, 2):
            s0, e0 = struct.unpack_from('<QQ', r, 8)
            if s0 == 0 or e0 < s0:
                continue
            corr, = struct.unpack_from('<I', r, 32)
            fl, = struct.unpack_from('<I', r, 52)
            ops.append((corr, fl, r[57], r[58], r[59]))
    chunk_ops = [o for o in ops if o[0] in links]
    chunks = sum(1 for o in chunk_ops if link_seq[o[0]] in copy_seqs)
    unjoined = sum(1 for o in ops if o[0] == 0 or
                   (o[0] not in links and o[0] not in copy_corrs))
    prog_pinned_async = sum(
        1 for o in ops if o[0] not in links and o[1] & GPU_ASYNC and
        ((o[2] == HTOD and o[3] == PINNED) or (o[2] == DTOH and o[4] == PINNED)))
    return chunks, unjoined, prog_pinned_async


def ms(ns):
    return '%.3f' % (ns / 1e6)


def check(pl, path):
    bad = []
    # A sentence a line: the cross references are looked for whole.
    env = dict(os.environ, PAGELOCK_NO_ADDR2LINE='1', NO_COLOR='1', COLUMNS='1000')
    js = json.loads(subprocess.run([pl, 'report', '--format', 'json', path],
                                   capture_output=True, env=env).stdout)
    text = subprocess.run([pl, 'report', path], capture_output=True,
                          env=env).stdout.decode()
    p = js['processes'][0]
    g, j = p['gpu'], p['gpu']['join']
    chunks, unjoined, pinned_async = truth(path)
    if g['status'] == 'on':
        if j.get('chunks') != chunks:
            bad.append('join.chunks %s, the trace links %d chunks' %
                       (j.get('chunks'), chunks))
        if j['gpu_ops_unjoined'] != unjoined:
            bad.append('%d GPU copies matched no call; %d are named by no '
                       'COPY or LINK' % (j['gpu_ops_unjoined'], unjoined))
        if j['calls'] > p['totals']['copies']:
            bad.append('more joined calls than copies')
        got = sum(d['pinned_async_copies'] for d in g['devices'])
        if got != pinned_async:
            bad.append('%d pinned async copies counted; the program made %d'
                       % (got, pinned_async))
    devs = {d['device']: d for d in g['devices']}
    for v in g['verdicts']:
        if v['kind'] == 'same-stream':
            d = devs[v['device']]
            m = re.search(r'(\d+) of (\d+) pinned async copies', v['text'])
            if not m or int(m.group(2)) != pinned_async:
                bad.append('same-stream verdict cites copies the program did '
                           'not make: ' + v['text'])
            if v['ns'] != d.get('same_stream_exposed_ns'):
                bad.append('same-stream verdict time %d is not its copies\' '
                           'exposed time %s' % (v['ns'],
                                                d.get('same_stream_exposed_ns')))
            if not v['text'].endswith(', %s ms exposed)' % ms(v['ns'])):
                bad.append('same-stream verdict text cites another time: ' +
                           v['text'])
        if v['kind'] == 'made-sync':
            if v['ns'] != j['made_sync_host_ns']:
                bad.append('made-sync verdict time is not its calls\'')
            pe = g.get('pageable_exposed_ns', 0)
            if pe and ('left the GPU %s ms' % ms(pe)) not in v['text']:
                bad.append('made-sync verdict lacks the pageable exposed time')
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if 'see above' in line:
            bad.append('unnamed cross reference: ' + line)
        m = re.search(r"see '([^']+)' above", line)
        if m and not any(l.startswith(m.group(1)) for l in lines[:i]):
            bad.append('nothing above for: ' + line)
        if 'see the notes above' in line and \
                not any(l.startswith(('note:', 'warning:')) for l in lines[:i]):
            bad.append('no notes above: ' + line)
    return bad


def main():
    pl, traces = sys.argv[1], sys.argv[2:]
    rc = 0
    for t in traces:
        for b in check(pl, t):
            print('FAIL %s: %s' % (t, b))
            rc = 1
    return rc


if __name__ == '__main__':
    sys.exit(main())
