#!/usr/bin/env python3
"""Each member's hand-in phase on the server's clock (the log's time mod 80 ms) and the ticks' start phase, by
stretch, from a server log at GST_DEBUG=personaplexticker:6 (docs/server.md, "Clocks that drift").

  scripts/drift/handin-phases.py SERVER.log [STRETCH_S]

A member that drifts against the server's clock moves through the period; one the ticks follow drags their phase."""
import os, sys, collections, cmath, math

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'pipelines', 'fleet'))
from tickerlog import HAND, TICK, lines  # noqa: E402

P = 0.080


def circ_median(ts):
    # the circular mean of phases (ms in [0, 80)): stable across the wrap
    z = sum(cmath.exp(2j * math.pi * (t % P) / P) for t in ts) / len(ts)
    return (cmath.phase(z) / (2 * math.pi) * P) % P * 1000


def main():
    path = sys.argv[1]
    stretch = float(sys.argv[2]) if len(sys.argv) > 2 else 5.0
    names, hands, starts = {}, collections.defaultdict(list), []
    for t, line in lines(path):
        r = HAND.search(line)
        if r:
            name = names.setdefault(r.group(1), 'm%d' % len(names))
            hands[name].append(t)
            continue
        r = TICK.search(line)
        if r and r.group(1) == 'tick':
            starts.append(t - float(r.group(8)) / 1000)
    if not starts:
        print('no ticks')
        return
    t0, t1 = starts[0], starts[-1]
    k = 0
    print('phase (ms, the server clock mod 80 ms) by stretch: ticks, then each member')
    while t0 + k * stretch < t1:
        a, b = t0 + k * stretch, t0 + (k + 1) * stretch
        k += 1
        st = [t for t in starts if a <= t < b]
        if not st:
            continue
        row = ['%5.0f s: ticks %4.1f' % (a - t0, circ_median(st))]
        for name in sorted(hands, key=lambda n: int(n[1:])):
            v = [t for t in hands[name] if a <= t < b]
            if len(v) > 5:
                row.append('%s %4.1f' % (name, circ_median(v)))
        print('  '.join(row))


main()
