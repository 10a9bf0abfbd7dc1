"""seqlab.inspect: look inside trained models (attention maps, …)."""
