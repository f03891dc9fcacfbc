#!/usr/bin/env python3
"""Hand-in phases and ticks from a server's log at GST_DEBUG=personaplexticker:6 (fleet-live.sh --keep-logs).

  pipelines/fleet/ticker-phases.py NAME.log.gz [--window FROM TO]... [--timeline FROM TO]

Members are named m0, m1, ... in the order of their first hand-in (about join order). For each --window (seconds of
the server's GStreamer clock) it prints every member's median hand-in time after the previous tick's start, earliest
first, and their spread; --timeline prints every hand-in and every tick's start and end between FROM and TO
(docs/server.md, "Joins and leaves": the ramp's split ticks)."""
import os, sys, statistics, collections

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tickerlog import HAND, TICK, lines  # noqa: E402


def events(path):
    names, ev = {}, []
    for t, line in lines(path):
        r = HAND.search(line)
        if r:
            name = names.setdefault(r.group(1), 'm%d' % len(names))
            ev.append((t, 'H', name, 'during a tick' if r.group(3) else '',
                       'behind %s ms, %s/%s pending' % (r.group(4), r.group(5), r.group(6))))
            continue
        r = TICK.search(line)
        if r:
            ran = float(r.group(8)) / 1000
            desc = '%s of %s rows (%s waited, %s missed), oldest waited %s ms, ran %s ms' % (
                r.group(1), r.group(2), r.group(3), r.group(4), r.group(7), r.group(8))
            ev.append((t - ran, 'S', desc))   # the line is written at the end: start = end - ran
            ev.append((t, 'E', ''))
    ev.sort(key=lambda e: e[0])
    return ev


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    ev = events(argv[1])
    args = argv[2:]
    while args:
        opt, lo, hi = args[0], float(args[1]), float(args[2])
        args = args[3:]
        if opt == '--timeline':
            for e in ev:
                if lo <= e[0] < hi:
                    print('%.4f %s' % (e[0], {'H': 'hand-in', 'S': 'START', 'E': 'end'}[e[1]]), *e[2:])
        elif opt == '--window':
            last, ph = None, collections.defaultdict(list)
            for e in ev:
                if e[1] == 'S':
                    last = e[0]
                elif e[1] == 'H' and last is not None and lo <= e[0] < hi:
                    ph[e[2]].append((e[0] - last) * 1000)
            s = sorted((statistics.median(v), k) for k, v in ph.items())
            if s:
                print('%.2f-%.2f s: spread %.1f ms;' % (lo, hi, s[-1][0] - s[0][0]),
                      ' '.join('%s:%.0f' % (k, v) for v, k in s))
        else:
            print('unknown option %s' % opt, file=sys.stderr)
            return 2
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
