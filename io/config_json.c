// config_json.c - model/config.h's view over cJSON: a cfg_value is a cJSON node
#include "io/config_json.h"

#include <cjson/cJSON.h>

static const cJSON *node(const struct cfg_value *v) {
    return (const cJSON *)(const void *)v;
}

static const struct cfg_value *value(const cJSON *j) {
    return (const struct cfg_value *)(const void *)j;
}

static const struct cfg_value *member(const struct cfg_value *v, const char *key) {
    return cJSON_IsObject(node(v)) ? value(cJSON_GetObjectItemCaseSensitive(node(v), key)) : NULL;
}

static enum cfg_kind kind(const struct cfg_value *v) {
    const cJSON *j = node(v);
    return cJSON_IsNull(j)     ? CFG_NULL
           : cJSON_IsBool(j)   ? CFG_BOOL
           : cJSON_IsNumber(j) ? CFG_NUMBER
           : cJSON_IsString(j) ? CFG_STRING
           : cJSON_IsArray(j)  ? CFG_ARRAY
                               : CFG_OBJECT;
}

static bool boolean(const struct cfg_value *v) {
    return cJSON_IsTrue(node(v));
}

static double number(const struct cfg_value *v) {
    return node(v)->valuedouble;
}

static const char *string(const struct cfg_value *v) {
    return node(v)->valuestring;
}

static int length(const struct cfg_value *v) {
    return cJSON_GetArraySize(node(v));
}

static const struct cfg_value *element(const struct cfg_value *v, int i) {
    return value(cJSON_GetArrayItem(node(v), i));
}

static const struct cfg_ops json_ops = {member, kind, boolean, number, string, length, element};

struct config config_json(const void *root, const char *path) {
    return (struct config){&json_ops, value(root), path};
}
