"""The inference runtime: model families written here (no remote code), loading from a
Hugging Face directory or hub id, and the engine that runs any decoder under any KV cache
policy, owning forwards, NFE counting and decode timing (DESIGN.md section 3)."""
