/* personaplex-server: model work off the main loop. State changes that load the model, run a call's prompts
 * or tear a call down (set_state PLAYING / NULL) run on a pool of worker threads; their completion comes back
 * to the main context. Nothing the main loop runs waits for the model (issue 17, defect 3). */
#ifndef PPX_SERVER_WORKER_H
#define PPX_SERVER_WORKER_H

#include <glib.h>

G_BEGIN_DECLS

/* Runs work(data) on a worker thread, then done(data) on the main context (done may be NULL), then
 * destroy(data) there. */
void ppx_server_work (GFunc work, GSourceFunc done, gpointer data, GDestroyNotify destroy);
/* Waits for the jobs queued and running (at exit). */
void ppx_server_work_finish (void);

G_END_DECLS
#endif
