"""Netra inside the engines people serve with: Hugging Face transformers and vLLM (docs/integrations.md).

    from netra.integrations.transformers import apply_netra
    report = apply_netra(model)        # every supported RMSNorm of the model through netra.torch

    # vLLM: nothing to call; `pip install netra-kernel[torch]` registers the `netra` general plugin,
    # which vLLM loads in every process (netra.integrations.vllm).

The top layer: it may import netra.torch and everything below it, and nothing in netra imports it.
Importing this package imports neither torch nor either engine; each submodule imports torch (through
netra.torch) and none imports its engine at module level.
"""
