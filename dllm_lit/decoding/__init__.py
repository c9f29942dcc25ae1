"""The decoding engine: the speed paths behind the samplers (posterior providers and caches, score envelopes,
gap / compact / ordered decoding, bounded counts, step views, leave-one-out row providers)."""
