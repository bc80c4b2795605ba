// fuzz_tokenizer.c - libFuzzer target for the tokenizer (built with clang -fsanitize=fuzzer,
// address,undefined; CTest runs it for a bounded time, tests/CMakeLists.txt).
//
// The first byte picks the part under test: odd, the rest is a tokenizer.json for the loader
// (when it loads, it encodes and decodes a fixed text); even, the rest is text for the encoder of
// the tokenizer named by $FUZZ_TOKENIZER, whose ids are decoded back.
#include "io/tokenizer.h"
#include "model/ah.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static struct tokenizer *fixed;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *path = getenv("FUZZ_TOKENIZER");
    struct ah_error err = {0};
    if (!path || tok_load(&fixed, path, &err) < 0) abort(); // the harness is misconfigured
    return 0;
}

static void roundtrip(struct tokenizer *t, const char *text, size_t n) {
    struct tok_ids ids = {0};
    struct ah_error err = {0};
    if (tok_encode(t, text, n, true, &ids) == 0) {
        char *back = NULL;
        size_t len = 0;
        if (tok_decode(t, ids.v, ids.n, false, &back, &len, &err) == 0) free(back);
    }
    tok_ids_free(&ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    const char *rest = (const char *)data + 1;
    if (data[0] & 1) {
        struct tokenizer *t = NULL;
        struct ah_error err = {0};
        if (tok_load_json(&t, rest, size - 1, "fuzz.json", &err) == 0) {
            static const char text[] = "Hello, wörld! 123 <|bos|> 日本 😀 \xff end";
            roundtrip(t, text, sizeof text - 1);
            tok_free(t);
        }
        return 0;
    }
    roundtrip(fixed, rest, size - 1);
    return 0;
}
