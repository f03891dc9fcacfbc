/* personaplex-server: the worker pool (server-worker.h). */
#include "server-worker.h"

/* Joins and teardowns at once; more wait in the queue. Each holds a thread while its prompts run. */
#define MAX_WORKERS 16

typedef struct {
  GFunc work;
  GSourceFunc done;
  gpointer data;
  GDestroyNotify destroy;
} Job;

static GThreadPool *pool;
static GMutex pool_lock;

static gboolean
job_done (gpointer user_data)
{
  Job *job = user_data;
  if (job->done)
    job->done (job->data);
  return G_SOURCE_REMOVE;
}

static void
job_free (gpointer user_data)
{
  Job *job = user_data;
  if (job->destroy)
    job->destroy (job->data);
  g_free (job);
}

static void
run_job (gpointer job_data, gpointer unused)
{
  Job *job = job_data;
  job->work (job->data, NULL);
  g_main_context_invoke_full (g_main_context_default (), G_PRIORITY_DEFAULT, job_done, job, job_free);
}

void
ppx_server_work (GFunc work, GSourceFunc done, gpointer data, GDestroyNotify destroy)
{
  Job *job = g_new0 (Job, 1);
  job->work = work;
  job->done = done;
  job->data = data;
  job->destroy = destroy;
  g_mutex_lock (&pool_lock);
  if (!pool)
    pool = g_thread_pool_new (run_job, NULL, MAX_WORKERS, FALSE, NULL);
  g_thread_pool_push (pool, job, NULL);
  g_mutex_unlock (&pool_lock);
}

void
ppx_server_work_finish (void)
{
  g_mutex_lock (&pool_lock);
  GThreadPool *p = pool;
  pool = NULL;
  g_mutex_unlock (&pool_lock);
  if (p)
    g_thread_pool_free (p, FALSE, TRUE);
  /* the completions they posted run now, on this (the main) thread */
  while (g_main_context_iteration (g_main_context_default (), FALSE))
    ;
}
