// test_families.c - the family registry (model/family.h, model/families.c): every family's
// init-model presets read back through its own config reader and are chosen as that family;
// names are unique; a config naming no family gets the error listing every known name; the config
// view (model/config.h over io/config_json.c) answers the neutral value on absent keys and on
// values of another kind.
#include "io/config_json.h"
#include "model/ah.h"
#include "model/family.h"
#include "tests/check.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

// preset p of family f: parses, is chosen as f, opens with a tensor list and a catalogue
static void test_preset(const struct model_family *f, const struct model_preset *p) {
    cJSON *o = cJSON_Parse(p->config);
    CHECK(o != NULL);
    if (!o) return;
    struct config cf = config_json(o, "preset.json");
    const struct model_family *got = NULL;
    struct ah_error err = {0};
    CHECK_EQ(model_family_of(&cf, &got, &err), 0);
    CHECK(got == f);
    void *fm = NULL;
    struct model_tensor *list = NULL;
    int n = f->open(&fm, &cf, NULL, &list, &err);
    if (n <= 0) fprintf(stderr, "%s %s: %d %s\n", f->name, p->name, n, err.msg);
    CHECK(n > 0);
    struct model_info in;
    if (n > 0) {
        f->info(fm, &in);
        CHECK(in.n_blocks >= 1 && in.vocab >= 1 && in.hidden >= 1);
        CHECK(f->n_taps(fm) >= 1);
    }
    free(list);
    f->close(fm);
    cJSON_Delete(o);
}

static void test_registry(void) {
    int n = 0;
    for (int i = 0; model_families[i]; i++, n++) {
        const struct model_family *f = model_families[i];
        CHECK(model_family_named(f->name) == f);
        CHECK(f->ids && f->ids[0]);
        for (int j = 0; j < i; j++)
            CHECK(strcmp(model_families[j]->name, f->name) != 0);
        for (int p = 0; p < f->n_presets; p++)
            test_preset(f, &f->presets[p]);
    }
    CHECK(n >= 2);
    CHECK(model_family_named("nope") == NULL);
}

static void test_unknown(void) {
    cJSON *o = cJSON_Parse("{\"architectures\": [\"Nope\", 3], \"model_type\": \"nope\"}");
    struct config cf = config_json(o, "x/config.json");
    const struct model_family *f = model_families[0]; // overwritten with NULL
    struct ah_error err = {0};
    CHECK_EQ(model_family_of(&cf, &f, &err), -AH_EINVAL);
    CHECK(f == NULL);
    CHECK(strstr(err.msg, "x/config.json: unknown model family") == err.msg);
    for (int i = 0; model_families[i]; i++)
        for (const char *const *id = model_families[i]->ids; *id; id++)
            CHECK(strstr(err.msg, *id) != NULL);
    cJSON_Delete(o);
}

static void test_view(void) {
    cJSON *o = cJSON_Parse("{\"i\": 3, \"f\": 2.5, \"s\": \"x\", \"b\": false, \"a\": [1, \"y\"], "
                           "\"o\": {\"k\": true}, \"n\": null}");
    struct config c = config_json(o, "c.json");
    struct ah_error err = {0};
    int i = 7;
    double d = 0.0;
    CHECK_EQ(cfg_int(&c, "i", true, &i, &err), 0);
    CHECK_EQ(i, 3);
    CHECK_EQ(cfg_int(&c, "absent", false, &i, &err), 1);
    CHECK_EQ(cfg_int(&c, "f", true, &i, &err), -AH_EINVAL);
    CHECK(!strcmp(err.msg, "c.json: \"f\": expected an integer, not a fraction or out of range"));
    CHECK_EQ(cfg_int(&c, "s", true, &i, &err), -AH_EINVAL);
    CHECK(!strcmp(err.msg, "c.json: \"s\": expected an integer, not that type"));
    CHECK_EQ(cfg_int_in(&c, "i", true, &i, 4, 9, &err), -AH_EINVAL);
    CHECK(!strcmp(err.msg, "c.json: \"i\": 3 is out of range (expected 4 to 9)"));
    CHECK_EQ(cfg_double(&c, "f", true, &d, &err), 0);
    CHECK(d == 2.5);
    CHECK_EQ(cfg_double(&c, "missing", true, &d, &err), -AH_EINVAL);
    CHECK(!strcmp(err.msg, "c.json: missing \"missing\" (a number)"));
    CHECK(!strcmp(cfg_str(&c, "s"), "x") && cfg_str(&c, "i") == NULL);
    const struct cfg_value *a = cfg_get(&c, NULL, "a"), *ob = cfg_get(&c, NULL, "o");
    CHECK_EQ(cfg_kind(&c, a), CFG_ARRAY);
    CHECK_EQ(cfg_length(&c, a), 2);
    CHECK(cfg_number(&c, cfg_element(&c, a, 0)) == 1.0);
    CHECK(!strcmp(cfg_string(&c, cfg_element(&c, a, 1)), "y"));
    CHECK(cfg_element(&c, a, 2) == NULL && cfg_element(&c, ob, 0) == NULL);
    CHECK(cfg_get(&c, a, "k") == NULL); // members of an array: none
    CHECK(cfg_is_true(&c, cfg_get(&c, ob, "k")) && !cfg_is_false(&c, cfg_get(&c, ob, "k")));
    CHECK(cfg_is_false(&c, cfg_get(&c, NULL, "b")) && !cfg_is_false(&c, cfg_get(&c, NULL, "n")));
    CHECK_EQ(cfg_kind(&c, cfg_get(&c, NULL, "n")), CFG_NULL);
    CHECK_EQ(cfg_kind(&c, cfg_get(&c, NULL, "nope")), CFG_ABSENT);
    CHECK_EQ(cfg_length(&c, ob), 0);
    cJSON_Delete(o);
}

int main(void) {
    test_registry();
    test_unknown();
    test_view();
    return check_failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
