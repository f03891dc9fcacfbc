/* personaplex-loadgen --report: the run as one page of inline SVG (loadgen-html.h). */
#include "loadgen-html.h"

#include "tool-file.h"

#include <math.h>
#include <string.h>

#define W 960.0
#define H 240.0
#define LEFT 70.0
#define RIGHT 20.0
#define TOP 34.0
#define BOTTOM 40.0
#define MAX_SECONDS_DRAWN (24 * 3600)

/* One line of a chart: points (x seconds, y); a NAN y breaks it. */
typedef struct {
  const char *label;
  const char *color;
  GArray *x, *y; /* double */
} Line;

static void
line_init (Line *l, const char *label, const char *color)
{
  l->label = label;
  l->color = color;
  l->x = g_array_new (FALSE, FALSE, sizeof (double));
  l->y = g_array_new (FALSE, FALSE, sizeof (double));
}

static void
line_add (Line *l, double x, double y)
{
  g_array_append_val (l->x, x);
  g_array_append_val (l->y, y);
}

static void
line_clear (Line *l)
{
  g_array_unref (l->x);
  g_array_unref (l->y);
}

/* A number in the C locale (the page must not depend on LC_NUMERIC). */
static void
num (GString *s, const char *format, double v)
{
  char buf[G_ASCII_DTOSTR_BUF_SIZE];
  g_string_append (s, g_ascii_formatd (buf, sizeof buf, format, v));
}

static void
text (GString *s, const char *t)
{
  g_autofree char *escaped = g_markup_escape_text (t, -1);
  g_string_append (s, escaped);
}

/* Opens an SVG text at (x, y) with the attributes attrs: <text x="X" y="Y" attrs>. */
static void
text_at (GString *s, double x, double y, const char *attrs)
{
  g_string_append (s, "<text x=\"");
  num (s, "%.1f", x);
  g_string_append (s, "\" y=\"");
  num (s, "%.1f", y);
  g_string_append_printf (s, "\" %s>", attrs);
}

/* 1, 2 or 5 times a power of ten, at least range / 5. */
static double
nice_step (double range)
{
  if (!(range > 0))
    return 1;
  double raw = range / 5, p = pow (10, floor (log10 (raw)));
  return raw <= p ? p : raw <= 2 * p ? 2 * p : raw <= 5 * p ? 5 * p : 10 * p;
}

static void
chart (GString *h, const char *title, const char *unit, double x_max, const Line *lines, guint n, const char *note)
{
  double y_max = 0;
  for (guint i = 0; i < n; i++)
    for (guint k = 0; k < lines[i].y->len; k++) {
      double y = g_array_index (lines[i].y, double, k);
      if (isfinite (y) && y > y_max)
        y_max = y;
    }
  double y_step = nice_step (y_max > 0 ? y_max : 1);
  y_max = y_step * ceil ((y_max > 0 ? y_max : 1) / y_step);
  x_max = x_max > 1 ? x_max : 1;
  double x_step = nice_step (x_max);
  double pw = W - LEFT - RIGHT, ph = H - TOP - BOTTOM;
#define X(v) (LEFT + pw * (v) / x_max)
#define Y(v) (TOP + ph * (1 - (v) / y_max))
  g_string_append (h, "<h2>");
  text (h, title);
  g_string_append (h, "</h2>\n<svg width=\"960\" height=\"240\" viewBox=\"0 0 960 240\" role=\"img\">\n");
  g_string_append (h, "<rect x=\"0\" y=\"0\" width=\"960\" height=\"240\" fill=\"#ffffff\"/>\n");
  for (double y = 0; y <= y_max + y_step / 2; y += y_step) {
    g_string_append (h, "<line x1=\"");
    num (h, "%.1f", LEFT);
    g_string_append (h, "\" x2=\"");
    num (h, "%.1f", W - RIGHT);
    g_string_append (h, "\" y1=\"");
    num (h, "%.1f", Y (y));
    g_string_append (h, "\" y2=\"");
    num (h, "%.1f", Y (y));
    g_string_append (h, "\" stroke=\"#dddddd\"/>\n");
    text_at (h, LEFT - 6, Y (y) + 4, "text-anchor=\"end\" font-size=\"11\"");
    num (h, y_step < 1 ? "%.2f" : "%.0f", y);
    g_string_append (h, "</text>\n");
  }
  for (double x = 0; x <= x_max + x_step / 2; x += x_step) {
    text_at (h, X (x), H - BOTTOM + 16, "text-anchor=\"middle\" font-size=\"11\"");
    num (h, "%.0f", x);
    g_string_append (h, "</text>\n");
  }
  text_at (h, LEFT + pw / 2, H - 6, "text-anchor=\"middle\" font-size=\"12\"");
  g_string_append (h, "seconds of the run</text>\n<text x=\"14\" y=\"");
  num (h, "%.1f", TOP + ph / 2);
  g_string_append (h, "\" text-anchor=\"middle\" font-size=\"12\" transform=\"rotate(-90 14 ");
  num (h, "%.1f", TOP + ph / 2);
  g_string_append (h, ")\">");
  text (h, unit);
  g_string_append (h, "</text>\n<rect x=\"");
  num (h, "%.1f", LEFT);
  g_string_append (h, "\" y=\"");
  num (h, "%.1f", TOP);
  g_string_append (h, "\" width=\"");
  num (h, "%.1f", pw);
  g_string_append (h, "\" height=\"");
  num (h, "%.1f", ph);
  g_string_append (h, "\" fill=\"none\" stroke=\"#888888\"/>\n");
  for (guint i = 0; i < n; i++) {
    const Line *l = &lines[i];
    gboolean open = FALSE;
    for (guint k = 0; k < l->y->len; k++) {
      double x = g_array_index (l->x, double, k), y = g_array_index (l->y, double, k);
      if (!isfinite (y) || !isfinite (x)) {
        if (open)
          g_string_append (h, "\"/>\n");
        open = FALSE;
        continue;
      }
      if (!open) {
        g_string_append_printf (h, "<polyline fill=\"none\" stroke-width=\"1.5\" stroke=\"%s\" points=\"", l->color);
        open = TRUE;
      }
      num (h, "%.1f", X (x));
      g_string_append_c (h, ',');
      num (h, "%.1f", Y (y));
      g_string_append_c (h, ' ');
    }
    if (open)
      g_string_append (h, "\"/>\n");
    g_string_append (h, "<rect x=\"");
    num (h, "%.1f", LEFT + 10 + 190 * i);
    g_string_append_printf (h, "\" y=\"10\" width=\"14\" height=\"4\" fill=\"%s\"/>\n<text x=\"", l->color);
    num (h, "%.1f", LEFT + 28 + 190 * i);
    g_string_append (h, "\" y=\"16\" font-size=\"12\">");
    text (h, l->label);
    g_string_append (h, "</text>\n");
  }
  if (note) {
    text_at (h, LEFT + pw / 2, TOP + ph / 2, "text-anchor=\"middle\" font-size=\"13\" fill=\"#666666\"");
    text (h, note);
    g_string_append (h, "</text>\n");
  }
  g_string_append (h, "</svg>\n");
#undef X
#undef Y
}

static const LoadgenCall *
call_at (const LoadgenReport *r, guint i)
{
  return g_ptr_array_index (r->records, i);
}

static double
since_start (const LoadgenReport *r, gint64 us)
{
  return (us - r->start_us) / 1e6;
}

/* The seconds the charts span: the run's wall time, or the last message when later. */
static guint
run_seconds (const LoadgenReport *r)
{
  double end = r->wall_s;
  for (guint i = 0; i < r->records->len; i++) {
    const PpxChatRecord *rec = call_at (r, i)->record;
    if (rec && rec->events->len)
      end = MAX (end, since_start (r, g_array_index (rec->events, PpxChatEvent, rec->events->len - 1).time_us));
  }
  return (guint) CLAMP (ceil (end), 1, MAX_SECONDS_DRAWN);
}

/* Frame latency p50 and p99 by the second the answer frame arrived (its input page's send plus its latency). */
static void
latency_lines (const LoadgenReport *r, guint seconds, Line *p50, Line *p99)
{
  g_autoptr (GPtrArray) by_second = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
  for (guint s = 0; s < seconds; s++)
    g_ptr_array_add (by_second, g_array_new (FALSE, FALSE, sizeof (double)));
  for (guint i = 0; i < r->records->len; i++) {
    const PpxChatRecord *rec = call_at (r, i)->record;
    if (!rec || !rec->handshake_us)
      continue;
    g_autoptr (GArray) lat = ppx_chat_record_frame_latencies (rec, PPX_CHAT_FRAME);
    guint j = 0;
    for (guint k = 0; k < lat->len; k++) {
      gint64 complete = (gint64) (k + 1) * PPX_CHAT_FRAME;
      while (j < rec->sent->len && g_array_index (rec->sent, PpxChatSent, j).samples < complete)
        j++;
      if (j == rec->sent->len)
        break;
      double v = g_array_index (lat, double, k);
      double t = since_start (r, g_array_index (rec->sent, PpxChatSent, j).time_us) + v / 1000;
      if (isfinite (v) && t >= 0 && t < seconds)
        g_array_append_val (g_ptr_array_index (by_second, (guint) t), v);
    }
  }
  for (guint s = 0; s < seconds; s++) {
    GArray *v = g_ptr_array_index (by_second, s);
    LoadgenSummary sum;
    loadgen_summarize ((const double *) (void *) v->data, v->len, &sum);
    line_add (p50, s + 0.5, sum.p50);
    line_add (p99, s + 0.5, sum.p99);
  }
}

static void
playout_lines (const LoadgenReport *r, guint seconds, Line *missed, Line *dropped, LoadgenPlayout *total)
{
  g_autoptr (GArray) per_second = g_array_new (FALSE, TRUE, sizeof (LoadgenPlayoutSecond));
  memset (total, 0, sizeof *total);
  for (guint i = 0; i < r->records->len; i++) {
    LoadgenPlayout p;
    if (loadgen_call_playout (call_at (r, i), r->start_us, per_second, &p)) {
      total->missed_ms += p.missed_ms;
      total->dropped_ms += p.dropped_ms;
      total->rebuffers += p.rebuffers;
    }
  }
  for (guint s = 0; s < seconds; s++) {
    const LoadgenPlayoutSecond *b = s < per_second->len ? &g_array_index (per_second, LoadgenPlayoutSecond, s) : NULL;
    line_add (missed, s + 0.5, b ? b->missed_ms : 0);
    line_add (dropped, s + 0.5, b ? b->dropped_ms : 0);
  }
}

static void
call_lines (const LoadgenReport *r, guint seconds, Line *joined, Line *open)
{
  for (guint s = 0; s <= seconds; s++) {
    guint j = 0, o = 0;
    for (guint i = 0; i < r->records->len; i++) {
      const PpxChatRecord *rec = call_at (r, i)->record;
      if (!rec || !rec->handshake_us || since_start (r, rec->handshake_us) > s)
        continue;
      j++;
      o += !rec->end_us || since_start (r, rec->end_us) > s;
    }
    line_add (joined, s, j);
    line_add (open, s, o);
  }
}

char *
loadgen_report_to_html (const LoadgenReport *r)
{
  static const char *colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
                                 "#17becf"};
  guint seconds = run_seconds (r);
  GString *h = g_string_new ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                             "<title>personaplex-loadgen report</title>\n</head>\n"
                             "<body style=\"font-family: sans-serif; margin: 16px;\">\n"
                             "<h1>personaplex-loadgen</h1>\n<p>");
  guint ok, refused, failed;
  loadgen_report_counts (r, &ok, &refused, &failed);
  g_autofree char *head = g_strdup_printf ("%u call(s) to %s, %.1f s each, joining over %.1f s, started %s; "
                                           "ok %u, refused %u, failed %u; result %s.", r->calls, r->url ? r->url : "?",
                                           r->seconds, r->ramp_s, r->started_utc ? r->started_utc : "?", ok, refused,
                                           failed, loadgen_report_passed (r) ? "PASS" : "FAIL");
  text (h, head);
  g_string_append (h, "</p>\n");

  Line lat[2];
  line_init (&lat[0], "frame latency p50", colors[0]);
  line_init (&lat[1], "frame latency p99", colors[1]);
  latency_lines (r, seconds, &lat[0], &lat[1]);
  chart (h, "Frame latency of the frames answered in each second", "ms", seconds, lat, 2, NULL);

  Line play[2];
  line_init (&play[0], "missed audio", colors[1]);
  line_init (&play[1], "dropped audio", colors[3]);
  LoadgenPlayout total;
  playout_lines (r, seconds, &play[0], &play[1], &total);
  g_autofree char *play_title = g_strdup_printf ("Audio missed and dropped at the reference player, all calls, "
                                                 "each second (in all: %.1f ms missed, %.1f ms dropped, %u re-buffers)",
                                                 total.missed_ms, total.dropped_ms, total.rebuffers);
  chart (h, play_title, "ms", seconds, play, 2, NULL);

  Line calls[2];
  line_init (&calls[0], "calls joined", colors[0]);
  line_init (&calls[1], "calls open", colors[2]);
  call_lines (r, seconds, &calls[0], &calls[1]);
  chart (h, "Calls joined (handshakes so far) and open", "calls", seconds, calls, 2, NULL);

  guint n = r->health ? r->health->len : 0;
  g_autofree Line *ticks = g_new0 (Line, MAX (n, 1));
  for (guint i = 0; i < n; i++) {
    const LoadgenHealth *hl = g_ptr_array_index (r->health, i);
    line_init (&ticks[i], hl->name, colors[i % G_N_ELEMENTS (colors)]);
    g_array_append_vals (ticks[i].x, hl->t_s->data, hl->t_s->len);
    g_array_append_vals (ticks[i].y, hl->tick_p99_ms->data, hl->tick_p99_ms->len);
  }
  chart (h, "Servers' tick p99 (their /health, polled each second)", "ms", seconds, ticks, n,
         n ? NULL : "not measured: run with --health NAME=URL");
  g_string_append (h, "</body>\n</html>\n");
  for (guint i = 0; i < 2; i++) {
    line_clear (&lat[i]);
    line_clear (&play[i]);
    line_clear (&calls[i]);
  }
  for (guint i = 0; i < n; i++)
    line_clear (&ticks[i]);
  return g_string_free (h, FALSE);
}

gboolean
loadgen_report_write_html (const LoadgenReport *r, const char *path, GError **error)
{
  g_autofree char *html = loadgen_report_to_html (r);
  return tool_write_file (path, html, strlen (html), error);
}
