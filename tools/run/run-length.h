/* personaplex-run's output is exactly as long as its input: the decoded input's duration in output
 * samples (frames x rate / input rate, summed over the decoder's buffers, rounded), not what the
 * resampler makes of it, which may be a sample or two longer or shorter at its edges.
 *
 * Two pad probes hold the element's input to that count: one counts the decoded samples before the
 * resampler, one at the resampler's output (a pad at the output rate, mono 32-bit float) trims the
 * excess edge samples and, at EOS, pads the missing ones with silence. The element answers every input
 * sample, so its output, and the number of 80 ms frames, follow. A difference of more than a few hundred
 * samples would mean the count is wrong, not the resampler: then the resampled samples stand as they are. */
#ifndef PPX_RUN_LENGTH_H
#define PPX_RUN_LENGTH_H

#include <gst/gst.h>

G_BEGIN_DECLS

typedef struct _RunLength RunLength;

/* `decoded`: a sink pad that sees the decoder's output (e.g. audioconvert's); `resampled_sink` and
 * `resampled_src`: the sink and source pads of an element after the resampler (e.g. a capsfilter), whose
 * source pad gets the padding at EOS. `length` must outlive the pipeline's streaming. */
RunLength *run_length_new (int rate);
void run_length_attach (RunLength *length, GstPad *decoded, GstPad *resampled_sink, GstPad *resampled_src);
/* The input's length in output samples (final once the stream has ended). */
guint64 run_length_expected (const RunLength *length);
void run_length_free (RunLength *length);

G_END_DECLS
#endif
