// decoder_presets.h - the config.json texts of model/decoder_presets.c
#ifndef AH_DECODER_PRESETS_H
#define AH_DECODER_PRESETS_H

extern const char pr_llama[], pr_llama_untied[], pr_mistral[], pr_qwen2[], pr_qwen3[], pr_mixtral[],
    pr_qwen3_moe[], pr_gemma2[], pr_gemma3[];

#endif
