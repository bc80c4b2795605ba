// config_json.h - model/config.h's read-only view over a cJSON document
#ifndef AH_CONFIG_JSON_H
#define AH_CONFIG_JSON_H

#include "model/config.h"

// A view of root (a cJSON object, borrowed) whose messages name path (borrowed).
struct config config_json(const void *root, const char *path);

#endif
