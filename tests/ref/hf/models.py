"""Dispatch a config to its family's forward pass."""
from .config import family_of


def forward(cfg, weights, prompts, **opts):
    fam = family_of(cfg)
    if fam == "gpt2":
        from .gpt2 import forward as f
    elif fam == "gpt_neox":
        from .neox import forward as f
    else:
        from .decoder import forward as f
    return f(cfg, weights, prompts, **opts)
