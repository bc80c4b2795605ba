// ops.h - pure float32 kernels of the forward passes, each with a naive `_ref` twin for tests.
//
// Kernels never fail and never allocate; preconditions are AH_ASSERTs. Parameters go outputs,
// inputs, weights, sizes. Matrices are row-major; a weight `w` is [out, in] like torch.nn.Linear.
//
// Threads: every kernel splits its rows over op_threads() OpenMP threads - the GEMMs in parts of
// rows, each part one sgemm on one OpenBLAS thread; the other kernels (and the BF16 widening) each
// row computed whole by one thread, so their results do not depend on the thread count (a GEMM's
// may, in the last bits: OpenBLAS's kernels round a part as they like). Call them from one thread
// at a time, or from the threads of a parallel region (then each call runs on its thread).
#ifndef AH_OPS_H
#define AH_OPS_H

#include <math.h>
#include <stdint.h>

// out[M,N] = in[M,K] . w[N,K]^T (cblas_sgemm); the rows split over op_threads() threads in parts
// of at least OP_SPLIT_ROWS, each one single-threaded sgemm (within a parallel region: one sgemm)
#define OP_SPLIT_ROWS 256
void op_matmul(float *out, const float *in, const float *w, int M, int K, int N);
// the same into out's columns of a wider product, rows ldo apart (a panel of weight rows)
void op_matmul_ld(float *out, int ldo, const float *in, const float *w, int M, int K, int N);
// the same with w[K,N] (GPT-2's Conv1D layout): out = in . w
void op_matmul_kn(float *out, const float *in, const float *w, int M, int K, int N);
void op_matmul_ref(float *out, const float *in, const float *w, int M, int K, int N);

// BF16 weights stay BF16 in memory: w16[N,K] is widened into `panel` a block of whole rows at a
// time and each block is one sgemm: out[M,N] = in[M,K] . w16^T. A block is every row of w16 when
// N*K <= OP_PANEL_FLOATS, else the rows split evenly into blocks of at most
// max(OP_PANEL_MIN_ROWS, OP_PANEL_FLOATS / K) rows: large, so that each sgemm call amortises its
// packing of `in`, and each output element is one dot product over the full K. (With OpenBLAS
// 0.3.21 the result then equals one sgemm of the whole widened matrix bit for bit at M >= 64;
// tests/test_ops.c checks it.)
// `panel` holds at least op_bf16_panel_floats(K, N) floats = min(N*K, max(OP_PANEL_FLOATS,
// OP_PANEL_MIN_ROWS*K)), which grows with K and with N: a caller sizes one buffer for all its
// matrices from the largest K and the largest N.
#define OP_PANEL_FLOATS   ((int64_t)1 << 22) // 16 MiB of float32
#define OP_PANEL_MIN_ROWS 1024
int64_t op_bf16_panel_floats(int K, int N);
void op_matmul_bf16(float *out, const float *in, const uint16_t *w16, int M, int K, int N,
                    float *panel);
// The compute mode of op_matmul_bf16, set once before the first forward pass: OP_COMPUTE_F32
// (the default: the panels above), or OP_COMPUTE_BF16: `in` rounded to bf16 and the product run
// bf16 x bf16 -> float32 by oneDNN (model/dnnl.h), w16 packed at its first product and the packed
// copy kept (by its address) until mm16_forget: under bf16, w16 must stay put and unchanged till
// then (a model's weights: model_free forgets). op_set_compute: 0, or -1 with a message in msg.
enum op_compute { OP_COMPUTE_F32, OP_COMPUTE_BF16 };
int op_set_compute(enum op_compute c, char *msg, int msg_size);
enum op_compute op_compute(void);
// Under OP_COMPUTE_BF16 only (asserted): out = bf16(in)[M,K] . w16 with w16 (K, N) row-major
// (GPT-2's Conv1D layout), by oneDNN (model/dnnl.h mm16_matmul_kn).
void op_matmul_bf16_kn(float *out, const float *in, const uint16_t *w16, int M, int K, int N);
static inline float op_bf16(uint16_t h) {
    union {
        uint32_t u;
        float f;
    } v = {(uint32_t)h << 16};
    return v.f;
}

// out[t,:] = in[t,:] / sqrt(mean(in[t,:]^2) + eps) * w; out may equal in (LlamaRMSNorm)
void op_rmsnorm(float *out, const float *in, const float *w, int T, int C, float eps);
void op_rmsnorm_ref(float *out, const float *in, const float *w, int T, int C, float eps);
// Gemma's RMSNorm: the same times (1 + w) (1.0f + w[c] in float32, as GemmaRMSNorm), eps a
// double as the config gives it (not rounded to float); out may equal in
void op_rmsnorm_1p(float *out, const float *in, const float *w, int T, int C, double eps);
void op_rmsnorm_1p_ref(float *out, const float *in, const float *w, int T, int C, double eps);
// torch.nn.LayerNorm over each row of C: (x - mean) / sqrt(biased variance + eps) * w + b, the
// mean and variance in double; out may equal in
void op_layernorm(float *out, const float *in, const float *w, const float *b, int T, int C,
                  float eps);
void op_layernorm_ref(float *out, const float *in, const float *w, const float *b, int T, int C,
                      float eps);

// RoPE tables for positions 0..T-1 and rotated pairs j < n_rot/2:
// cos_t[t * n_rot/2 + j] = cos(t * theta^(-2j/head_dim)), likewise sin_t.
void op_rope_table(float *cos_t, float *sin_t, int T, int head_dim, int n_rot, double theta);
// The same tables the way Hugging Face forms them in float32: angle (float)t * inv_freq[j] in
// float, cos and sin of it in double, rounded, times A (YaRN's attention factor; 1 otherwise).
// inv_freq (n_rot/2) may be sin_t's first row: that row is written last.
void op_rope_table_f32(float *cos_t, float *sin_t, int T, int n_rot, const float *inv_freq,
                       float A);
// Rotate-half RoPE in place on x[T, H*head_dim] (row stride `stride` floats) for positions 0..T-1:
// pairs (j, j + n_rot/2) of the first n_rot dims of each head; dims past n_rot are left alone.
void op_rope(float *x, const float *cos_t, const float *sin_t, int T, int H, int head_dim,
             int n_rot, int stride);
void op_rope_ref(float *x, int T, int H, int head_dim, int n_rot, int stride, double theta);

// Naive softmax of each row of x[rows, n] in place (double sums; -inf entries become 0): the
// twin that op_softmax_ranges is tested against.
void op_softmax_rows_ref(float *x, int rows, int n);

// Softmax of one row x[n] over the entries in [a0, a1) and [b0, b1) (disjoint, possibly empty,
// not both); every other entry becomes exactly 0, as if it were -inf. The causal and windowed
// masks of attention are such ranges, so blocked entries cost nothing.
void op_softmax_ranges(float *x, int n, int a0, int a1, int b0, int b1);
// The same softmax (the same bits) touching only the entries in the two ranges: the caller
// zeroes what it reads of the rest.
void op_softmax_within(float *x, int a0, int a1, int b0, int b1);
// op_softmax_within of n (1 .. OP_SOFTMAX_ROWS) rows at once, row k at x + k ld over
// [a0[k], a1[k]) and [b0[k], b1[k]): each row the bits it gets alone (its sum in its order), the
// rows' sums side by side so that their additions overlap
#define OP_SOFTMAX_ROWS 8
void op_softmax_within_rows(float *x, int64_t ld, int n, const int *a0, const int *a1,
                            const int *b0, const int *b1);
// The largest of mx and x[0..n) that `mx = x[i] > mx ? x[i] : mx` in order finds (NaN never
// taken), in SSE lanes: only a tie of +0 and -0 may come out with the other sign, and a softmax's
// x - mx and expf give the same bits for either.
float op_max_from(const float *x, int n, float mx);
// x[i] = expf(x[i] - m) for 0 <= i < n: the exponentials of a softmax (libm's bits, vexp.h)
void op_exp_minus(float *x, int n, float m);

// out[i] = silu(gate[i]) * up[i]
void op_swiglu(float *out, const float *gate, const float *up, int64_t n);
void op_swiglu_ref(float *out, const float *gate, const float *up, int64_t n);

// gpt-oss's clamped SwiGLU (GptOssExperts): g = min(gate, limit), u = clamp(up, -limit, limit),
// up[i] becomes (u + 1) * g * sigmoid(alpha g); gate is left as it is
void op_swiglu_clamp(float *up, const float *gate, int64_t n, float alpha, float limit);
void op_swiglu_clamp_ref(float *up, const float *gate, int64_t n, float alpha, float limit);

// out[i] = a[i] + b[i]; out may equal a
void op_add(float *out, const float *a, const float *b, int64_t n);
// x[r, j] += b[j] for each of the rows rows of n (a Linear's bias)
void op_add_bias(float *x, const float *b, int64_t rows, int64_t n);

// ---- activations (float32, as torch computes them) ----
static inline float act_silu(float x) {
    return x / (1.0f + expf(-x));
}
static inline float act_sigmoid(float x) {
    return 1.0f / (1.0f + expf(-x));
}
// torch.nn.functional.softplus (beta 1, threshold 20): log1p(exp(x)), x itself above 20
static inline float act_softplus(float x) {
    return x > 20.0f ? x : log1pf(expf(x));
}
// GELU, exact (erf) and the tanh approximation (gelu_new, gelu_pytorch_tanh)
static inline float act_gelu(float x) {
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
}
static inline float act_gelu_tanh(float x) {
    return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}
static inline float act_relu(float x) {
    return x > 0.0f ? x : 0.0f;
}

// The one activation enum of every family: the MLP's (named as transformers' ACT2FN keys) and
// Laguna's softplus gate and sigmoid router.
enum op_act_kind {
    OP_ACT_SILU,      // "silu", "swish"
    OP_ACT_GELU,      // "gelu": exact, with erf
    OP_ACT_GELU_TANH, // "gelu_new", "gelu_pytorch_tanh", "gelu_fast": the tanh approximation
    OP_ACT_RELU,      // "relu"
    OP_ACT_SOFTPLUS,  // torch.nn.functional.softplus (no config name)
    OP_ACT_SIGMOID    // "sigmoid" (not accepted as an MLP's activation)
};
// The MLP activation a config string names, or -1 (an unknown name or NULL); the accepted names:
#define OP_ACT_NAMES "silu, swish, gelu, gelu_pytorch_tanh, gelu_new, gelu_fast or relu"
int op_act_parse(const char *name);
// act(x), one of the act_* above
static inline float op_act1(enum op_act_kind act, float x) {
    switch (act) {
        case OP_ACT_GELU_TANH:
            return act_gelu_tanh(x);
        case OP_ACT_GELU:
            return act_gelu(x);
        case OP_ACT_RELU:
            return act_relu(x);
        case OP_ACT_SOFTPLUS:
            return act_softplus(x);
        case OP_ACT_SIGMOID:
            return act_sigmoid(x);
        default:
            return act_silu(x);
    }
}
// x[i] = act(x[i]); the twin in double
void op_act(float *x, int64_t n, enum op_act_kind act);
void op_act_ref(float *x, int64_t n, enum op_act_kind act);
// x[i] *= s[i / group] (group 1: elementwise; group D: one factor a head of D values)
void op_mul(float *x, const float *s, int64_t n, int64_t group);
// up[i] *= act(gate[i]): a gated MLP's activation and product in one pass, the bits of op_act on
// gate then op_mul (SiLU through op_swiglu's exponentials a block at a time)
void op_act_mul(float *up, const float *gate, int64_t n, enum op_act_kind act);
// x[i] *= s
void op_scale(float *x, float s, int64_t n);

// A loop of the forward passes is split over op_threads() OpenMP threads only when it touches at
// least this many floats: below it the fork costs more than it saves. (A build with
// -DOP_PAR_MIN=1 splits every loop, to check that no result depends on the thread count.)
#ifndef OP_PAR_MIN
#define OP_PAR_MIN (1 << 14)
#endif

// Threads of the non-GEMM kernels, fixed at the first call: OMP_NUM_THREADS if it is set, else
// OpenBLAS's count (OPENBLAS_NUM_THREADS, else the CPUs this process may run on), so that one
// variable sets both and `OPENBLAS_NUM_THREADS=1` for one rank per core keeps every rank on one.
int op_threads(void);
// Sets the thread count op_threads() returns from now on (n >= 1), as `harvest bench --threads`.
void op_set_threads(int n);
// Around a parallel region of nt threads that each call sgemm (experts, attention heads):
// OpenBLAS on one thread inside it (nt > 1), its count back after. op_thread_id(): the calling
// thread's number in the region (0 outside one).
int op_blas_serial(int nt);
void op_blas_restore(int nt, int was);
int op_thread_id(void);

#endif
