/* The CUDA backend against the CPU backend (the numerical reference), op by op, on random inputs of
 * awkward sizes; then the golden conversation end to end on the GPU, and the prompt prefill (cuda-test-prefill.c).
 * Exits 77 without a GPU.
 *
 * Tolerances: ops whose GPU and CPU arithmetic is the same sequence of f32 operations (embedding
 * gathers, RVQ decode, copies, fills, teacher forcing, greedy sampling, RVQ codes) must match exactly.
 * Everything else (sums in another order, the device's expf/erff/sinf, fused multiply-adds) must agree to
 * max |gpu - cpu| <= TOL * max(1, max |cpu|) with TOL = 1e-5. Temperature sampling must give the CPU's
 * token for every (seed, frame, stream) on logits whose top-k probabilities are well separated.
 *
 * Attention runs over f32, bf16 and fp8 caches; each format is compared with the CPU backend using the same
 * format (the stored values decode exactly on both, so TOL applies), and the caches must be the same bytes.
 * The tensor-core linear layers keep x in 16 bits (hi/lo bf16), ~2e-6 relative: within the same TOL. They must
 * also give every row of a batched call bit for bit as a one-row call (/cuda/linear-batch).
 *
 * `test-backend-cuda --bench [int4|int8|bf16|f32 [ROWSxCOLS]]` instead times linear layers of the temporal
 * transformer's shapes at M = 1, 8, 32, 64 (CUDA graphs, GPU time) and prints weight bandwidth and TFLOP/s,
 * then (without a format) the attention benchmark; `--bench-attention` runs only that: T = 1 attention at cap = context = 3000 with 32 heads of 128 for
 * M = 1, 8, 32, 64 sessions per KV format, time per layer and GB/s of KV read. `--bench-conv` times every conv call
 * of a Mimi frame (the real encoder and decoder shapes) at M = 1, 8, 32, 64 (or PPX_BENCH_MS) with the direct
 * kernels (PPX_BENCH_CONV_DIRECT=0 skips them) and the planned implicit-GEMM path (PPX_BENCH_CONV_ONLY=NAME,
 * PPX_BENCH_CONV_CFG / _SPLIT: one conv, a forced tile and leaf count, for profiling), and the SEANet sums;
 * `--bench-conv-sweep [M ...]` times every tile configuration and leaf count of the GEMM path on those shapes
 * (planner tuning). */
#include "cuda-test.h"

int
main (int argc, char **argv)
{
  int n_gpus = 0;
  gboolean bench = argc > 1 && g_str_equal (argv[1], "--bench");
  gboolean bench_att = argc > 1 && g_str_equal (argv[1], "--bench-attention");
  gboolean bench_conv = argc > 1 && g_str_equal (argv[1], "--bench-conv");
  gboolean bench_sweep = argc > 1 && g_str_equal (argv[1], "--bench-conv-sweep");
  if (!ppx_backend_cuda_available (&n_gpus)) {
    g_autoptr (GError) err = NULL;
    PpxBackend *b = ppx_backend_cuda_new (0, &err);
    g_assert_null (b);
    g_assert_error (err, PPX_ERROR, PPX_ERROR_UNSUPPORTED);
    g_printerr ("no usable GPU (%s); skipping\n", err->message);
    return PPX_TEST_SKIP;
  }
  g_autoptr (GError) err = NULL;
  cpu = ppx_backend_cpu_new (0, &err);
  g_assert_no_error (err);
  gpu = ppx_backend_cuda_new (0, &err);
  g_assert_no_error (err);
  g_assert_null (ppx_backend_cuda_new (n_gpus, &err));
  g_assert_error (err, PPX_ERROR, PPX_ERROR_INVALID);
  g_clear_error (&err);
  g_printerr ("CUDA backend on %s (%d GPU%s)\n", ppx_backend_device_name (gpu), n_gpus, n_gpus > 1 ? "s" : "");
  rng = g_rand_new_with_seed (20260101);
  int rc;
  if (bench) {
    rc = run_bench (argc > 2 ? argv[2] : NULL, argc > 3 ? argv[3] : NULL);
  } else if (bench_att) {
    rc = run_bench_attention ();
  } else if (bench_conv) {
    rc = run_bench_conv ();
  } else if (bench_sweep) {
    rc = run_bench_conv_sweep (argc - 2, argv + 2);
  } else {
    g_test_init (&argc, &argv, NULL);
    g_test_add_func ("/cuda/memory", test_memory);
    g_test_add_func ("/cuda/linear", test_linear);
    g_test_add_func ("/cuda/linear-batch", test_linear_batch);
    g_test_add_func ("/cuda/linear-batch-slices", test_linear_batch_slices);
    g_test_add_func ("/cuda/linear-gemv", test_linear_gemv);
    g_test_add_func ("/cuda/linear-wgmma-path", test_linear_wgmma_path);
    g_test_add_func ("/cuda/rmsnorm-linear", test_rmsnorm_linear);
    g_test_add_func ("/cuda/silu-gate-linear", test_silu_gate_linear);
    g_test_add_func ("/cuda/layer-tail", test_layer_tail);
    g_test_add_func ("/cuda/embed", test_embed);
    g_test_add_func ("/cuda/elementwise", test_elementwise);
    g_test_add_func ("/cuda/rope", test_rope);
    g_test_add_func ("/cuda/attention", test_attention);
    g_test_add_func ("/cuda/conv1d", test_conv1d);
    g_test_add_func ("/cuda/conv-transpose1d", test_conv_transpose1d);
    g_test_add_func ("/cuda/conv-mimi", test_conv_mimi);
    g_test_add_func ("/cuda/conv-batch", test_conv_batch);
    g_test_add_func ("/cuda/conv-pieces", test_conv_pieces);
    g_test_add_func ("/cuda/vq", test_vq);
    g_test_add_func ("/cuda/sample", test_sample);
    g_test_add_func ("/cuda/force-tokens", test_force_tokens);
    g_test_add_func ("/cuda/pdl-chain", test_pdl_chain);
    g_test_add_func ("/cuda/golden", test_golden);
    g_test_add_func ("/cuda/prefill", test_prefill);
    rc = g_test_run ();
  }
  g_rand_free (rng);
  ppx_backend_free (gpu);
  ppx_backend_free (cpu);
  return rc;
}
