/* personaplexduplex: what a server needs to know how many calls its engine
 * holds in real time (docs/element.md, "Measuring the tick"): the engine's
 * tick measured at full context (the `measure-tick` action signal) and the
 * live ticks (the `tick-history` property and the `tick-history-since` action
 * signal). Internal to the plugin. */
#ifndef __GST_PP_CAPACITY_H__
#define __GST_PP_CAPACITY_H__

#include "gstppmodelpool.h"

G_BEGIN_DECLS

#define GST_PP_TICK_MEASURE_NAME "personaplex-tick-measure"
#define GST_PP_TICK_HISTORY_NAME "personaplex-tick-history"

/* A tick of @rows sessions at full context, @ticks times (ppx_engine_measure_tick), each at least as long as
 * PPX_TICK_EMULATE's device makes it: rows, padded-rows, ticks, min-ms, p50-ms, p99-ms, max-ms, emulated-ms; or, when
 * it could not be measured (no model, too few free slots), only rows and `error` (a string). */
GstStructure *gst_pp_measure_tick (const GstPpModelHandle * model,
    guint rows, guint ticks);

/* The ticker's live ticks after its @since-th (0: all it keeps), oldest first: total (ticks since the start), rows,
 * ms and age-ms (how long ago each ended) as arrays; empty arrays without a model. */
GstStructure *gst_pp_tick_history_structure_new (const GstPpModelHandle *
    model, guint64 since);

G_END_DECLS

#endif /* __GST_PP_CAPACITY_H__ */
