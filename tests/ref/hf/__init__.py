"""Independent float64 numpy references of the Hugging Face decoder families of issue 11.

Written from transformers' own code (src/transformers/models/<family>/modeling_<family>.py,
configuration_<family>.py and src/transformers/modeling_rope_utils.py), never from harvest's C.

    from hf import load_checkpoint, forward, count_params
    cfg, w = load_checkpoint(model_dir)        # config.json + safetensors (single or sharded)
    outs = forward(cfg, w, [[1, 2, 3], [4, 5]])  # one dict per prompt: nnterp name -> array
    count_params(cfg)                           # parameters as transformers instantiates them

The names and what each means per family are in NAMES.md beside this file.
"""
from .config import family_of, resolve
from .params import count_params
from .safetensors_io import load_checkpoint, read_safetensors, write_safetensors
from .models import forward
from .aliases import aliases

__all__ = ["family_of", "resolve", "count_params", "load_checkpoint", "read_safetensors",
           "write_safetensors", "forward", "aliases"]
