"""Reading a server's log at GST_DEBUG=personaplexticker:5 or more (plain or .gz): each line's GStreamer time stamp
in seconds with the colours taken out, and the ticker's hand-in and tick lines (gst/gstppticker.c). Used by
ticker-phases.py here and by scripts/drift/*.py."""
import gzip, re

HAND = re.compile(r'member (0x[0-9a-f]+) handed in (-?[\d.]+) ms after the last tick ended( \(a tick runs\))?, '
                  r'(-?[\d.]+) ms behind(?:: (\d+) of (\d+) waited)?')
TICK = re.compile(r'(catch-up tick|tick) of (\d+) rows \((\d+) waited for, (\d+) missed it; (\d+) members\): '
                  r'(-?[\d.]+) ms after the last one ended, its oldest frame waited ([\d.]+) ms, ran ([\d.]+) ms')
ANSI = re.compile(r'\x1b\[[0-9;]*m')


def lines(path):
    """(seconds, line) for each line that starts with a GStreamer time stamp (H:MM:SS.nnnnnnnnn)."""
    opener = gzip.open if path.endswith('.gz') else open
    with opener(path, 'rt', errors='replace') as f:
        for line in f:
            line = ANSI.sub('', line)
            stamp = line.split(' ', 1)[0]
            if stamp.count(':') != 2:
                continue
            h, m, s = stamp.split(':')
            try:
                yield int(h) * 3600 + int(m) * 60 + float(s), line
            except ValueError:
                continue
