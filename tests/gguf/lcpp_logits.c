// lcpp_logits.c - llama.cpp's logits for given token ids, every position, for
// tests/gguf/check_laguna_gguf.py (compares them with harvest's on the same checkpoint).
//
//   lcpp_logits MODEL.gguf FLASH_ATTN(0|1) THREADS BETA_FAST BETA_SLOW OUT.f32 ID...
//
// Loads the GGUF on the CPU, decodes the T ids as one batch in a fresh sequence (positions
// 0..T-1) and writes the (T, V) float32 logits, row-major, to OUT.f32. The KV cache is float32
// (llama.cpp's default, float16, rounds K and V to 11 bits). BETA_FAST and BETA_SLOW set the
// context's YaRN correction bounds (a negative value keeps llama.cpp's: its Laguna loader does not
// read the GGUF's yarn_beta_* keys and uses 32 and 1). Built against a llama.cpp
// build tree (include/, ggml/include/, build/bin/libllama.so); not part of harvest's build.
// Exit 1 on bad arguments, 2 when llama.cpp fails.
#include <stdio.h>  // defines: fopen, fwrite, fprintf
#include <stdlib.h> // defines: atoi, strtol, strtof

#include "llama.h"

static int fail(const char *what) {
    fprintf(stderr, "lcpp_logits: %s\n", what);
    return 2;
}

int main(int argc, char **argv) {
    if (argc < 8) {
        fprintf(stderr, "usage: lcpp_logits MODEL.gguf FLASH_ATTN(0|1) THREADS BETA_FAST "
                        "BETA_SLOW OUT.f32 ID...\n");
        return 1;
    }
    int T = argc - 7;
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) return fail("cannot load the model");
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(T < 64 ? 64 : T);
    cp.n_batch = (uint32_t)T;
    cp.n_ubatch = (uint32_t)T;
    cp.n_threads = cp.n_threads_batch = atoi(argv[3]);
    cp.yarn_beta_fast = strtof(argv[4], NULL);
    cp.yarn_beta_slow = strtof(argv[5], NULL);
    cp.type_k = cp.type_v = GGML_TYPE_F32;
    cp.flash_attn_type =
        atoi(argv[2]) ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) return fail("cannot make a context");
    int V = llama_vocab_n_tokens(llama_model_get_vocab(model));
    struct llama_batch b = llama_batch_init(T, 0, 1);
    for (int i = 0; i < T; i++) {
        b.token[i] = (llama_token)strtol(argv[7 + i], NULL, 10);
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = 1;
    }
    b.n_tokens = T;
    if (llama_decode(ctx, b) != 0) return fail("llama_decode failed");
    FILE *f = fopen(argv[6], "wb");
    if (!f) return fail("cannot write OUT.f32");
    for (int i = 0; i < T; i++) {
        const float *row = llama_get_logits_ith(ctx, i);
        if (!row || fwrite(row, sizeof(float), (size_t)V, f) != (size_t)V) return fail("logits");
    }
    if (fclose(f) != 0) return fail("cannot write OUT.f32");
    llama_batch_free(b);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
