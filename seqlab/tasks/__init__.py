"""seqlab.tasks: what to learn — data, loss, metrics and decoding for each kind of task."""
