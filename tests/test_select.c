// test_select.c - token selection primitives (jobs/select.c): the key, one context's choice
// against a brute-force count, the norm guard's median, and the "select"/"statistics" job keys.
#include "jobs/select.h"
#include "model/ah.h"
#include "tests/check.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

// the key against values computed independently (Python, splitmix64's published constants); a
// changed key would choose other tokens than earlier versions did
static void test_select_key_pinned(void) {
    CHECK(select_key(0, 0, 0) == 0x238275bc38fcbe91ull);
    CHECK(select_key(0, 0, 1) == 0x2f32a78496c67c60ull);
    CHECK(select_key(7, 123, 45) == 0xc8c3197adbb41b07ull);
    CHECK(select_key(1, -1, 3) == 0xe90bac85841a9bb1ull);
}

// keep[t] == 1 exactly for the eligible t with fewer than k eligible keys below theirs
static void test_select_context_brute_force(void) {
    enum { T = 300 };
    int64_t ids[T];
    uint8_t keep[T];
    for (int t = 0; t < T; t++)
        ids[t] = (t * 7919) % 50;
    int64_t skip[] = {3, 0, 17, 3}; // unsorted with a duplicate: parse sorts them
    struct select_spec s = {.seed = 42, .skip_first = 5, .tokens_per_context = 16};
    s.skip_ids = skip;
    s.n_skip_ids = 3; // {0, 3, 17} after sorting (done by hand here)
    skip[0] = 0, skip[1] = 3, skip[2] = 17;
    for (int64_t src = 0; src < 20; src++) {
        struct select_counts c = {0};
        int64_t n = select_context(&s, src, ids, T, keep, &c);
        CHECK_EQ(n, 16);
        CHECK_EQ(c.kept + c.skipped_first + c.skipped_id + c.not_chosen, T);
        CHECK_EQ(c.skipped_first, 5);
        int64_t kept = 0;
        for (int t = 0; t < T; t++) {
            bool elig = t >= 5 && ids[t] != 0 && ids[t] != 3 && ids[t] != 17;
            int below = 0;
            for (int u = 0; u < T && elig; u++) {
                bool eu = u >= 5 && ids[u] != 0 && ids[u] != 3 && ids[u] != 17;
                below += eu && select_key(42, src, u) < select_key(42, src, t);
            }
            CHECK_EQ(keep[t], elig && below < 16);
            kept += keep[t];
            CHECK(!(keep[t] && (ids[t] == 0 || ids[t] == 3 || ids[t] == 17 || t < 5)));
        }
        CHECK_EQ(kept, 16);
    }
    // fewer eligible than k: all kept; another seed chooses otherwise
    struct select_counts c = {0};
    CHECK_EQ(select_context(&s, 0, ids, 20, keep, &c), 15 - c.skipped_id);
    uint8_t k2[T];
    select_context(&s, 3, ids, T, keep, NULL);
    s.seed = 43;
    select_context(&s, 3, ids, T, k2, NULL);
    CHECK(memcmp(keep, k2, T) != 0);
    // no tokens_per_context: every eligible token
    s.tokens_per_context = 0;
    int64_t elig = 0;
    for (int t = 5; t < T; t++)
        elig += ids[t] != 0 && ids[t] != 3 && ids[t] != 17;
    CHECK(elig < T - 5);
    CHECK_EQ(select_context(&s, 3, ids, T, keep, NULL), elig);
}

static void test_select_skips_id(void) {
    int64_t v[] = {1, 5, 9, 1000000000000};
    struct select_spec s = {.skip_ids = v, .n_skip_ids = 4};
    CHECK(select_skips_id(&s, 1) && select_skips_id(&s, 9) && select_skips_id(&s, 1000000000000));
    CHECK(!select_skips_id(&s, 0) && !select_skips_id(&s, 6) && !select_skips_id(&s, 10));
    struct select_spec none = {0};
    CHECK(!select_skips_id(&none, 0));
}

static void test_select_norm_median(void) {
    struct norm_median a, b;
    CHECK_EQ(norm_median_init(&a, 5) | norm_median_init(&b, 5), 0);
    CHECK(isnan(norm_median_value(&a)));
    const double x[] = {3, 1, 4, 1.5, 9, 2.6, 5};
    for (int i = 0; i < 7; i++)
        CHECK(norm_median_push(&a, x[i]) == (i < 5)); // the first 5 only
    for (int i = 4; i >= 0; i--)
        norm_median_push(&b, x[i]); // the same set in another order
    CHECK(norm_median_value(&a) == 3.0);
    CHECK(norm_median_value(&b) == 3.0);
    norm_median_free(&b);
    CHECK_EQ(norm_median_init(&b, 4), 0);
    CHECK(norm_median_push(&b, NAN)); // not taken
    for (int i = 0; i < 4; i++)
        norm_median_push(&b, x[i]);
    CHECK_EQ(b.n, 4);
    CHECK(norm_median_value(&b) == 1.5); // lower median of {1, 1.5, 3, 4}
    CHECK(select_norm_keep(30, 3, 10) && !select_norm_keep(30.0001, 3, 10));
    CHECK(!select_norm_keep(NAN, 3, 10));
    norm_median_free(&a), norm_median_free(&b);
}

// parses text as "select" and expects rc; with an error, its message contains want
static void parse_case(const char *text, int want_rc, const char *want) {
    cJSON *j = cJSON_Parse(text);
    CHECK(j != NULL);
    struct select_spec s;
    struct ah_error err = {0};
    int rc = select_parse(j, "job.json", &s, &err);
    if (rc != want_rc || (want && !strstr(err.msg, want))) {
        fprintf(stderr, "select %s: rc %d (want %d), \"%s\" (want \"%s\")\n", text, rc, want_rc,
                err.msg, want ? want : "");
        check_failures++;
    }
    select_free(&s);
    cJSON_Delete(j);
}

static void test_select_parse(void) {
    cJSON *j =
        cJSON_Parse("{\"seed\": 9, \"skip_first\": 1, \"skip_token_ids\": [5, 2, \"special\","
                    " 5], \"tokens_per_context\": 8, \"max_norm_multiple\": 10, "
                    "\"max_norm_activation\": \"layers.3.layer_output\"}");
    struct select_spec s;
    struct ah_error err = {0};
    CHECK_EQ(select_parse(j, "job.json", &s, &err), 0);
    CHECK(s.given && s.seed == 9 && s.skip_first == 1 && s.tokens_per_context == 8);
    CHECK(s.n_skip_ids == 2 && s.skip_ids[0] == 2 && s.skip_ids[1] == 5 && s.skip_special);
    CHECK(s.max_norm_multiple == 10 && s.max_norm_sample == 4096);
    CHECK(s.max_norm_activation && !strcmp(s.max_norm_activation, "layers.3.layer_output"));
    // resolve: specials merged, sorted, unique
    const int64_t special[] = {7, 2, 0};
    CHECK_EQ(select_resolve(&s, 100, true, special, 3, "job.json", &err), 0);
    CHECK(s.n_skip_ids == 4 && s.skip_ids[0] == 0 && s.skip_ids[1] == 2 && s.skip_ids[3] == 7);
    select_free(&s);
    // "special" without a tokenizer, an id outside the vocabulary
    CHECK_EQ(select_parse(j, "job.json", &s, &err), 0);
    CHECK_EQ(select_resolve(&s, 100, false, NULL, 0, "job.json", &err), -AH_EINVAL);
    CHECK(strstr(err.msg, "job.json: \"select.skip_token_ids\": \"special\" needs") != NULL);
    CHECK_EQ(select_resolve(&s, 5, true, special, 3, "job.json", &err), -AH_EINVAL);
    CHECK(strstr(err.msg, "\"select.skip_token_ids\": id 5 is not a token") != NULL);
    select_free(&s);
    cJSON_Delete(j);
    // absent: every default
    CHECK_EQ(select_parse(NULL, "job.json", &s, &err), 0);
    CHECK(!s.given && s.tokens_per_context == 0 && s.max_norm_multiple == 0 && !s.n_skip_ids);
    select_free(&s);

    parse_case("{\"tokens_per_context\": 0}", -AH_EINVAL,
               "job.json: \"select.tokens_per_context\"");
    parse_case("{\"tokens_per_context\": 2.5}", -AH_EINVAL, "\"select.tokens_per_context\"");
    parse_case("{\"max_norm_multiple\": 1, \"max_norm_activation\": \"x\"}", -AH_EINVAL,
               "\"select.max_norm_multiple\": expected a number > 1");
    parse_case("{\"max_norm_multiple\": 0.5}", -AH_EINVAL, "\"select.max_norm_multiple\"");
    parse_case("{\"max_norm_multiple\": 4}", -AH_EINVAL, "\"select.max_norm_activation\"");
    parse_case("{\"max_norm_activation\": \"x\"}", -AH_EINVAL,
               "\"select.max_norm_activation\" without \"select.max_norm_multiple\"");
    parse_case("{\"skip_first\": -1}", -AH_EINVAL, "\"select.skip_first\"");
    parse_case("{\"seed\": \"a\"}", -AH_EINVAL, "\"select.seed\"");
    parse_case("{\"skip_token_ids\": [1, -2]}", -AH_EINVAL, "\"select.skip_token_ids[1]\"");
    parse_case("{\"skip_token_ids\": \"specials\"}", -AH_EINVAL, "\"select.skip_token_ids\"");
    parse_case("{\"tokens_per_contxt\": 4}", -AH_EINVAL, "unknown key \"tokens_per_contxt\"");
    parse_case("[1]", -AH_EINVAL, "\"select\": expected an object");
    parse_case("{\"skip_token_ids\": \"special\", \"max_norm_multiple\": 1.5, "
               "\"max_norm_activation\": \"logits\", \"max_norm_sample\": 10}",
               0, NULL);

    int st = 5;
    cJSON *t = cJSON_CreateTrue(), *n = cJSON_CreateNumber(1);
    CHECK_EQ(select_parse_statistics(NULL, "job.json", &st, &err), 0);
    CHECK_EQ(st, -1);
    CHECK_EQ(select_parse_statistics(t, "job.json", &st, &err), 0);
    CHECK_EQ(st, 1);
    CHECK_EQ(select_parse_statistics(n, "job.json", &st, &err), -AH_EINVAL);
    CHECK(strstr(err.msg, "job.json: \"statistics\": expected true or false") != NULL);
    cJSON_Delete(t), cJSON_Delete(n);
}

int main(void) {
    test_select_key_pinned();
    test_select_context_brute_force();
    test_select_skips_id();
    test_select_norm_median();
    test_select_parse();
    if (!check_failures) printf("test_select: all passed\n");
    return check_failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
