"""The OpenAI-compatible server (exllamav3 and transformers engines), its launcher, synthetic models."""
